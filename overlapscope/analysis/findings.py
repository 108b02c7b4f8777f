"""Diagnosis: findings ranked by the time at stake, each with its evidence and what to try.

Every finding's ``stake_us`` is time per step (mean over ranks) that the suggested change
could win back at most. Rules (thresholds are constants below):

* backward all-gathers' exposed transfer -> prefetch them (``backward_pre``);
* forward all-gathers' exposed transfer -> ``forward_prefetch``;
* time held by the all-gather rate limiter -> relax it where memory allows;
* one rank arriving last at most collectives, later than the clocks' uncertainty (a lag
  smaller than it could be a clock offset: collectives.py names no straggler then) -> look
  at that rank;
* bus bandwidth far below the link (when the link speed is known) -> the network.

Prefetching and a faster link are recommended only for the exposed transfer of a
collective issued on time (comm_causes.py): the parts issued late by the host and spent
waiting for the last rank are the host finding's (host_finding.py) and the straggler's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from overlapscope.analysis.comm_causes import PARTS as EXPOSED_PARTS
from overlapscope.manifest import RunManifest
from overlapscope.phases import Phase

# A finding needs at least this share of the mean step time at stake.
MIN_STAKE_FRACTION = 0.01
# A straggler is the last to arrive at more than this share of matched collectives.
STRAGGLER_SHARE = 0.5
# Bus bandwidth below this share of the link speed points at the network.
LINK_SHARE = 0.5
# Only collectives at least this large say anything about bandwidth.
MIN_BANDWIDTH_BYTES = 1 << 20


class FindingKind(enum.Enum):
    BACKWARD_ALL_GATHER_EXPOSED = "backward_all_gather_exposed"
    FORWARD_ALL_GATHER_EXPOSED = "forward_all_gather_exposed"
    RATE_LIMITER = "rate_limiter"
    STRAGGLER = "straggler"
    NETWORK = "network"
    CRITICAL_PATH = "critical_path"  # rule in analysis/path_report.py
    HOST_STARVED = "host_starved"  # rule in analysis/host_finding.py
    REDUCE_SCATTER_EXPOSED = "reduce_scatter_exposed"  # rules in analysis/dimension_findings.py
    REPLICA_ALL_REDUCE_EXPOSED = "replica_all_reduce_exposed"
    TP_EXPOSED = "tp_exposed"
    COLLECTIVE_HANG = "collective_hang"  # rule in flight/findings.py (Flight Recorder dumps)
    PEER_WAIT = "peer_wait"  # rule in flight/findings.py


@dataclass(frozen=True, slots=True)
class Finding:
    kind: FindingKind
    stake_us: float  # per step, mean over ranks
    title: str
    evidence: str
    change: str
    rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "stake_us": self.stake_us,
            "title": self.title,
            "evidence": self.evidence,
            "change": self.change,
            "rank": self.rank,
        }


def _phase_exposure(
    units: pd.DataFrame, ranks: pd.DataFrame, phase: Phase
) -> tuple[float, pd.DataFrame, dict[str, float]]:
    """The stake of a prefetch or a faster link for ``phase``'s collectives: their exposed
    transfer (the part longer than the compute meant to hide it; comm_causes.py), per step,
    mean over ranks; the units most at stake; each part's share, mean over ranks."""
    rows = units[units["phase"] == phase.value]
    columns = [f"exposed_{p}_per_step_us" for p in EXPOSED_PARTS]
    per_rank = rows.groupby("rank")[columns].sum().reindex(ranks["rank"], fill_value=0.0)
    means = per_rank.mean() if len(ranks) else pd.Series(0.0, index=columns)
    parts = {p: float(means[c]) for p, c in zip(EXPOSED_PARTS, columns, strict=True)}
    top = (
        rows.groupby("unit", dropna=False)["exposed_transfer_per_step_us"]
        .mean()
        .sort_values(ascending=False)
    )
    return parts["transfer"], top.reset_index(), parts


def _top_text(top: pd.DataFrame, n: int = 3) -> str:
    parts = [
        f"{u if isinstance(u, str) else '?'} {v:,.0f} µs"
        for u, v in top.head(n).itertuples(index=False)
    ]
    return ", ".join(parts)


def _parts_text(parts: dict[str, float]) -> str:
    """``; also exposed: 120 µs/step issued late by the host, 40 µs/step waiting for the
    last rank`` (the parts a prefetch does not fix), or ""."""
    said = [
        f"{parts[p]:,.0f} µs/step {words}"
        for p, words in (
            ("host_late", "issued late by the host (see the host finding)"),
            ("peer_wait", "waiting for the last rank"),
        )
        if parts[p] >= 0.5
    ]
    return f"; also exposed, not fixed by prefetching: {', '.join(said)}" if said else ""


def find(
    ranks: pd.DataFrame,
    units: pd.DataFrame,
    collectives: pd.DataFrame,
    manifest: RunManifest | None,
    *,
    has_gpu: bool = True,
) -> tuple[Finding, ...]:
    """All findings whose stake passes the threshold, largest stake first."""
    if ranks.empty:
        return ()
    step_us = float(ranks["step_time_per_step_us"].mean())
    floor = MIN_STAKE_FRACTION * step_us if np.isfinite(step_us) else 0.0
    config = manifest.engine if manifest else None
    policy = config.policy.value if config else None
    # An overlapscope engine run (its run.json lists units) is changed with our flags; any
    # other trace with torch FSDP's knobs.
    engine = manifest is not None and manifest.is_engine_run
    peaks = manifest.peak_mem_bytes if manifest else ()
    out = [
        *_backward_gathers(units, ranks, floor, policy, engine),
        *_forward_gathers(units, ranks, floor, bool(config and config.forward_prefetch), engine),
        *_rate_limiter(ranks, floor, peaks, engine),
    ]
    out.extend(_straggler(collectives, ranks, floor, has_gpu))
    out.extend(_network(collectives, ranks, manifest.link_gbit if manifest else None, floor))
    return tuple(sorted(out, key=lambda f: f.stake_us, reverse=True))


def _backward_gathers(
    units: pd.DataFrame, ranks: pd.DataFrame, floor: float, policy: object, engine: bool
) -> list[Finding]:
    stake, top, parts = _phase_exposure(units, ranks, Phase.AG_BWD)
    if stake > floor:
        if policy == "backward_pre" and engine:
            change = (
                "already --policy backward_pre, which prefetches one unit ahead: use fewer, "
                "larger units so each backward hides its successor's all-gather, or a faster link"
            )
        elif policy == "backward_pre":
            change = (
                "already backward_pre: prefetch deeper (FSDP2 set_modules_to_backward_prefetch) "
                "or use larger units so each backward hides its successor's all-gather"
            )
        elif engine:
            change = (
                "prefetch the next unit's all-gather before each unit's backward: "
                "--policy backward_pre"
            )
        else:
            change = (
                "prefetch the next unit's all-gather before each unit's backward: FSDP1 "
                "backward_prefetch=BackwardPrefetch.BACKWARD_PRE (FSDP2 prefetches one unit "
                "by default; set_modules_to_backward_prefetch for more)"
            )
        return [
            Finding(
                FindingKind.BACKWARD_ALL_GATHER_EXPOSED,
                stake,
                "backward all-gathers are exposed",
                f"{stake:,.0f} µs/step of backward all-gather transfer runs longer than the "
                f"compute meant to hide it; most exposed units: {_top_text(top)}"
                f"{_parts_text(parts)}",
                change,
            )
        ]

    return []


def _forward_gathers(
    units: pd.DataFrame, ranks: pd.DataFrame, floor: float, forward_prefetch: bool, engine: bool
) -> list[Finding]:
    stake, top, parts = _phase_exposure(units, ranks, Phase.AG_FWD)
    if stake > floor:
        if forward_prefetch:
            change = (
                "already forward prefetch: make units larger or overlap the first all-gather "
                "with the data loading"
            )
        elif engine:
            change = "issue the next unit's all-gather during the current unit's forward: --forward-prefetch"
        else:
            change = (
                "issue the next unit's all-gather during the current unit's forward: FSDP1 "
                "forward_prefetch=True (FSDP2: set_modules_to_forward_prefetch)"
            )
        return [
            Finding(
                FindingKind.FORWARD_ALL_GATHER_EXPOSED,
                stake,
                "forward all-gathers are exposed",
                f"{stake:,.0f} µs/step of forward all-gather transfer runs longer than the "
                f"compute meant to hide it; most exposed units: {_top_text(top)}"
                f"{_parts_text(parts)}",
                change,
            )
        ]

    return []


def _rate_limiter(
    ranks: pd.DataFrame, floor: float, peaks: tuple[int, ...], engine: bool
) -> list[Finding]:
    limiter = float(ranks["limiter_per_step_us"].mean())
    if limiter > floor:
        mem = f"; peak memory {max(peaks) / 2**20:,.0f} MiB" if peaks else ""
        change = (
            "if there is memory headroom, relax the rate limiter: a larger K in "
            "--limit-all-gathers K, or leave the flag out"
            if engine
            else "if there is memory headroom, relax the rate limiter: FSDP1 "
            "limit_all_gathers=False (or allow more in-flight all-gathers)"
        )
        return [
            Finding(
                FindingKind.RATE_LIMITER,
                limiter,
                "the rate limiter holds all-gathers back",
                f"{limiter:,.0f} µs/step waiting in the all-gather rate limiter{mem}",
                change,
            )
        ]

    return []


def _straggler(
    collectives: pd.DataFrame, ranks: pd.DataFrame, floor: float, has_gpu: bool
) -> list[Finding]:
    multi = collectives[collectives["num_ranks"] >= 2]
    if multi.empty:
        return []
    counts = multi["straggler_rank"].value_counts()
    if counts.empty:  # no lag beyond the clocks' uncertainty
        return []
    rank = int(counts.index[0])
    share = float(counts.iloc[0]) / len(multi)
    if share <= STRAGGLER_SHARE or len(ranks) < 2:
        return []
    mine = multi[multi["straggler_rank"] == rank]
    steps = float(ranks["num_steps"].clip(lower=1).mean())
    # The others' waiting caused by this rank, per step, averaged over ranks.
    stake = float(mine["peer_wait_us"].sum()) / steps / len(ranks)
    if stake <= floor:
        return []
    return [
        Finding(
            FindingKind.STRAGGLER,
            stake,
            f"rank {rank} arrives last",
            f"rank {rank} starts last in {share:.0%} of {len(multi)} matched collectives, "
            f"{float(mine['straggler_lag_us'].median()):,.0f} µs late (median)"
            + _beyond(mine)
            + f"; peers wait {stake:,.0f} µs/step on average",
            f"look at rank {rank}: its host (CPU contention, data loading), "
            + ("its GPU clocks, " if has_gpu else "the cores it shares with other ranks, ")
            + "or extra work it does before the collectives",
            rank=rank,
        )
    ]


def _beyond(mine: pd.DataFrame) -> str:
    """``, beyond the clocks' uncertainty (200 µs, median)`` where it is known."""
    if "lag_uncertainty_us" not in mine or not mine["lag_uncertainty_us"].notna().any():
        return ""
    return f", beyond the clocks' uncertainty ({float(mine['lag_uncertainty_us'].median()):,.0f} µs, median)"


def _network(
    collectives: pd.DataFrame, ranks: pd.DataFrame, link: float | None, floor: float
) -> list[Finding]:
    if link is None:
        return []
    big = collectives[
        (collectives["bytes"] >= MIN_BANDWIDTH_BYTES) & collectives["busbw_gbps"].notna()
    ]
    if big.empty:
        return []
    busbw_gbit = float(big["busbw_gbps"].median()) * 8.0
    if busbw_gbit >= LINK_SHARE * link:
        return []
    steps = float(ranks["num_steps"].clip(lower=1).mean())
    # a faster link wins back only exposed transfer (comm_causes.py), at most this share
    stake = float(big["exposed_transfer_us"].sum()) / steps * (1.0 - busbw_gbit / link)
    if stake <= floor:
        return []
    return [
        Finding(
            FindingKind.NETWORK,
            stake,
            "bus bandwidth far below the link",
            f"median bus bandwidth {busbw_gbit:.2f} Gbit/s over {len(big)} collectives of "
            f">= 1 MiB, link {link:g} Gbit/s ({busbw_gbit / link:.0%}); their exposed "
            f"transfer {float(big['exposed_transfer_us'].sum()) / steps:,.0f} µs/step",
            "check the network: interface and route used by the backend (GLOO_SOCKET_IFNAME / "
            "NCCL_SOCKET_IFNAME), link speed, competing traffic; larger units amortise latency",
        )
    ]
