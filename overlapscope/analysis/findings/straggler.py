"""One rank arriving last at most collectives, later than the clocks' uncertainty (a lag
smaller than it could be a clock offset: collectives.py names no straggler then) -> look at
that rank. Stake: the waiting it caused its peers, per step, mean over ranks."""

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
    return [
        Finding(
            FindingKind.STRAGGLER,
            stake,
            f"rank {rank} arrives last",
            f"rank {rank} starts last in {share:.0%} of {len(multi)} matched collectives, "
            f"{float(mine['straggler_lag_us'].median()):,.0f} µs late (median)"
            + _beyond(mine)
            + f"; peers wait {stake:,.0f} µs/step on average",
            (
                Lever(
                    f"look at rank {rank}: its host (CPU contention, data loading), "
                    + (
                        "its GPU clocks, "
                        if inp.has_gpu
                        else "the cores it shares with other ranks, "
                    )
                    + "or extra work it does before the collectives",
                    f"its peers wait {stake:,.0f} µs/step for it",
                ),
            ),
            rank=rank,
            steps=tuple(sorted({int(s) for s in mine["step"]})),
            phase=main_part(mine["phase"].astype(object), mine["peer_wait_us"]),
            evidence=_items(mine, rank),
            cause="late_peer",
        )
    ]


RULE = FindingRule(
    FindingKind.STRAGGLER.value,
    "a straggler",
    "one rank starts last at more than half of the matched collectives, beyond the clocks' "
    "uncertainty -> that rank",
    find,
)
