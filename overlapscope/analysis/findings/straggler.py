"""One rank arriving last at most collectives, later than the clocks' uncertainty (a lag
smaller than it could be a clock offset: collectives.py names no straggler then) -> look at
that rank. Stake: the waiting it caused its peers, per step, mean over ranks.

A late start (it entered the step late and caught up) is told from a slow rank (it grew late
inside the step); for a slow rank, every rank late in most of a part's collectives is named,
and where a part of the step is longer on them than on the others, the measure that differs
(GPU op time, launch-call time, idle: findings/slow_phase.py) is named, with one evidence item
per rank carrying the measures, and the lever points at it."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from overlapscope.analysis.findings import (
    Evidence,
    Finding,
    FindingInput,
    FindingKind,
    FindingRule,
    Lever,
)
from overlapscope.analysis.findings.evidence import MAX_ITEMS, main_part
from overlapscope.analysis.findings.slow_phase import SlowPart, slow_parts
from overlapscope.analysis.host.phase_work import STEP
from overlapscope.analysis.registry import PHASE_WORK
from overlapscope.phases import step_part

# A straggler is the last to arrive at more than this share of matched collectives.
STRAGGLER_SHARE = 0.5


def _beyond(mine: pd.DataFrame) -> str:
    """``, beyond the clocks' uncertainty (200 µs, median)`` where it is known."""
    if "lag_uncertainty_us" not in mine or not mine["lag_uncertainty_us"].notna().any():
        return ""
    return f", beyond the clocks' uncertainty ({float(mine['lag_uncertainty_us'].median()):,.0f} µs, median)"


def _items(mine: pd.DataFrame, rank: int) -> tuple[Evidence, ...]:
    """Its latest arrivals, most late first: at the collective's start, its lag."""
    top = mine.sort_values("straggler_lag_us", ascending=False, kind="stable").head(MAX_ITEMS)
    return tuple(
        Evidence(rank, int(r.step), float(r.start_us), float(r.straggler_lag_us),
                 gpu_op=f"{r.kind}" + (f" of {r.unit}" if isinstance(r.unit, str) else ""))
        for r in top.itertuples(index=False)
    )  # fmt: skip


def late_ranks(multi: pd.DataFrame, per_rank: pd.DataFrame) -> dict[str | None, tuple[int, ...]]:
    """Per part of the step (phases.step_part): every rank late in more than half of its
    collectives. A rank is late at a collective when it arrived at least half the last
    rank's lag after the first rank, and beyond the clocks' uncertainty (its arrival: the
    longest wait at that collective less its own)."""
    keys = ["group", "step", "seq"]
    if per_rank.empty or "peer_wait_us" not in per_rank:
        return {}
    cols = [*keys, "phase", "straggler_lag_us", "lag_uncertainty_us"]
    rows = per_rank[[*keys, "rank", "peer_wait_us"]].merge(
        multi[[c for c in cols if c in multi]], on=keys
    )
    if rows.empty:
        return {}
    longest = rows.groupby(keys)["peer_wait_us"].transform("max")
    lag = longest - rows["peer_wait_us"]
    floor = rows["lag_uncertainty_us"].fillna(0.0) if "lag_uncertainty_us" in rows else 0.0
    late = (lag >= 0.5 * rows["straggler_lag_us"]) & (lag > floor) & (rows["straggler_lag_us"] > 0)
    rows = rows.assign(part=rows["phase"].astype(object).map(step_part), late=late)
    out: dict[str | None, tuple[int, ...]] = {}
    for part, mine in rows.groupby(rows["part"].fillna("-"), sort=False):
        n = mine[keys].drop_duplicates().shape[0]
        shares = mine.groupby("rank")["late"].sum() / n
        named = tuple(int(r) for r in shares.index[shares > STRAGGLER_SHARE])
        if named:
            out[None if part == "-" else str(part)] = named
    return out


def late_start(
    inp: FindingInput, rank: int, mine: pd.DataFrame
) -> tuple[float, list[float]] | None:
    """(its skew at its first step's start, its lags over that step's collectives) where
    ``rank`` entered the step late and caught up: it started its first counted step at least
    half its first lag after the first rank, and its last lag is under half its first."""
    steps = inp.steps
    if steps.empty or "start_us" not in steps:
        return None
    first = int(mine["step"].min())
    starts = steps[steps["step"] == first].set_index("rank")["start_us"]
    if rank not in starts.index or len(starts) < 2:
        return None
    skew = float(starts[rank] - starts.drop(rank).min())
    lags = mine[mine["step"] == first].sort_values("start_us")["straggler_lag_us"].tolist()
    if len(lags) < 2 or not (skew >= 0.5 * lags[0] and lags[-1] < 0.5 * lags[0]):
        return None
    return skew, lags


# What each measure that differs points at (findings/slow_phase.py).
_LOOK_AT = {
    "GPU op time": "their GPU: the same ops run longer there (clocks, power or thermal "
    "throttling, another process on the GPU: nvidia-smi -q -d CLOCK,PERFORMANCE)",
    "median launch call": "their host's CPU: each launch call takes longer there (contention: "
    "other processes or threads on the same cores; pin each rank's threads to its own cores, "
    "OMP_NUM_THREADS, fewer data-loader workers)",
    "idle": "what their host does between launches there (the host finding's CPU ranges on "
    "those ranks)",
}


def _slow_levers(
    found: SlowPart, who: str, stake: float, has_gpu: bool
) -> tuple[Lever, ...] | None:
    """The lever of a part longer on the slow ranks with a measure that differs."""
    looks = [_LOOK_AT[m] for m in found.differs if has_gpu or m != "GPU op time"]
    if not looks:
        return None
    return (
        Lever(
            f"look at {'the ' + found.part if found.part != STEP else 'the step'} on {who}: "
            + "; ".join(looks),
            f"{found.short()}; peers wait {stake:,.0f} µs/step for them",
        ),
    )


def _levers(
    inp: FindingInput,
    rank: int,
    stake: float,
    start: object,
    slow: str,
    named: tuple[int, ...],
    found: Sequence[SlowPart] = (),
) -> tuple[Lever, ...]:
    if start is not None:
        return (
            Lever(
                f"profile more steps (torch.profiler.schedule(active=N)) and look at what rank "
                f"{rank} does before the window: the previous step, data loading, checkpointing "
                "or logging on its host",
                f"its lateness was carried in from before the profiled step; peers wait "
                f"{stake:,.0f} µs/step for it",
            ),
        )
    where = f"the {slow} on " if slow else ""
    who = f"ranks {', '.join(map(str, named))}" if len(named) > 1 else f"rank {rank}"
    if found and (own := _slow_levers(found[0], who, stake, inp.has_gpu)):
        return own
    return (
        Lever(
            f"look at {where}{who}: its host (CPU contention, data loading), "
            + ("its GPU clocks, " if inp.has_gpu else "the cores it shares with other ranks, ")
            + "or extra work it does before the collectives"
            + ("; compare its op and launch-call times with the other ranks'" if slow else ""),
            f"its peers wait {stake:,.0f} µs/step for it",
        ),
    )


def _why_late(inp: FindingInput, start: tuple[float, list[float]] | None, parts: dict) -> str:
    if start is not None:
        skew, lags = start
        once = "; one profiled step cannot say whether it recurs" if inp.num_steps <= 1 else ""
        shown = ", ".join(f"{v:,.0f}" for v in lags[:6])
        return (
            f"; it entered the step {skew:,.0f} µs after the first rank and caught up "
            f"(its lag over the step's collectives: {shown} µs){once}"
        )
    said = [
        f"in the {p or 'step'}, rank{'s' if len(r) > 1 else ''} {', '.join(map(str, r))} "
        "late in most collectives"
        for p, r in parts.items()
    ]
    return f"; it grew late inside the step ({'; '.join(said)})" if said else ""


def find(inp: FindingInput) -> Sequence[Finding]:
    multi = inp.collectives[inp.collectives["num_ranks"] >= 2]
    if multi.empty or len(inp.ranks) < 2:
        return []
    counts = multi["straggler_rank"].value_counts()
    if counts.empty:  # no lag beyond the clocks' uncertainty
        return []
    rank = int(counts.index[0])
    share = float(counts.iloc[0]) / len(multi)
    if share <= STRAGGLER_SHARE:
        return []
    mine = multi[multi["straggler_rank"] == rank]
    # The others' waiting caused by this rank, per step, averaged over ranks.
    stake = float(mine["peer_wait_us"].sum()) / inp.num_steps / len(inp.ranks)
    if not inp.at_stake(stake):
        return []
    start = late_start(inp, rank, mine)
    parts = {} if start is not None else late_ranks(multi, inp.table("collective_ranks"))
    phase = main_part(mine["phase"].astype(object), mine["peer_wait_us"])
    named = parts.get(phase, ()) if start is None else ()
    late = tuple(sorted({rank, *named}))
    found = slow_parts(inp.table(PHASE_WORK), phase, late) if start is None else []
    return [
        Finding(
            FindingKind.STRAGGLER,
            stake,
            f"rank {rank} starts the step late" if start else f"rank {rank} arrives last",
            f"rank {rank} starts last in {share:.0%} of {len(multi)} matched collectives, "
            f"{float(mine['straggler_lag_us'].median()):,.0f} µs late (median)"
            + _beyond(mine)
            + f"; peers wait {stake:,.0f} µs/step on average"
            + _why_late(inp, start, parts)
            + "".join(f"; {f.words}" for f in found),
            _levers(inp, rank, stake, start, phase or "", late, found),
            rank=rank,
            ranks=late,
            steps=tuple(sorted({int(s) for s in mine["step"]})),
            phase=phase,
            evidence=(found[0].items if found else ()) + _items(mine, rank),
            cause="late_start" if start else "slow_rank",
        )
    ]


RULE = FindingRule(
    FindingKind.STRAGGLER.value,
    "a straggler",
    "one rank starts last at more than half of the matched collectives, beyond the clocks' "
    "uncertainty -> that rank",
    find,
)
