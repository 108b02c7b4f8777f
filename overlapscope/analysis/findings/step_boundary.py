"""The step boundary (analysis/host/step_boundary.py): GPU idle from one step's last GPU op to the
next step's first, and, for the first counted step, from its ``ProfilerStep`` start to its first
GPU op -> what the host did there. Stake: that idle per step, mean over ranks.

The figures' step span begins at a step's first GPU op, so the first counted step's lead is in
no other figure; a later step's boundary lies in the previous step's span, as idle the host
finding also counts (the summary says how much is outside). The first step's lead is left out
on a rank whose trace holds GPU work launched before the window (the GPU may be running it).
"""

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
from overlapscope.analysis.findings.evidence import MAX_ITEMS
from overlapscope.analysis.framework import Framework
from overlapscope.analysis.host.calls import Activity
from overlapscope.analysis.registry import BOUNDARIES

LEVERS = {
    Activity.DATA.value: (
        "load the next batch while the GPU works: DataLoader(num_workers=..., pin_memory=True, "
        "persistent_workers=True), prefetch_factor"
    ),
    Activity.OPTIMIZER.value: "optimizer.zero_grad(set_to_none=True) and a fused optimizer step",
    Activity.SYNC.value: "no sync at the step boundary: keep values on the GPU, log every N steps",
}
COPY = (
    "copy the batch from pinned memory with non_blocking=True (DataLoader(pin_memory=True), "
    ".to(device, non_blocking=True)) so it overlaps the previous step"
)
_COPY_OPS = ("aten::copy_", "aten::_to_copy", "aten::to")
# DDP flattens its buffers to broadcast them from rank 0 at each forward's start.
BUFFERS = (
    "DistributedDataParallel(broadcast_buffers=False) where the buffers need not be synced "
    "every step (DDP broadcasts them at each forward's start)"
)
OTHER = "move per-step bookkeeping (logging, metrics, checkpoints) out of the step or every N steps"


def _items(rows: pd.DataFrame) -> tuple[Evidence, ...]:
    top = rows.sort_values("idle_us", ascending=False, kind="stable").head(MAX_ITEMS)
    return tuple(
        Evidence(
            int(r.rank),
            int(r.step),
            float(r.first_gpu_us - r.idle_us),
            float(r.idle_us),
            (str(r.host_range),) if isinstance(r.host_range, str) else (),
        )
        for r in top.itertuples(index=False)
    )


def _known(rows: pd.DataFrame, ranks: pd.DataFrame) -> pd.DataFrame:
    """The boundaries whose GPU idle is known: not the first counted step's lead on a rank
    whose trace holds GPU work launched before the window (``num_unlaunched``: the profiler's
    warm-up, still running at the first step's start, with its launches not kept)."""
    if rows.empty or "num_unlaunched" not in ranks:
        return rows
    warm = set(ranks.loc[ranks["num_unlaunched"] > 0, "rank"].astype(int))
    return rows[~(rows["gap_before_us"].isna() & rows["rank"].astype(int).isin(warm))]


def _lever(inp: FindingInput, top: str | None, activity: str | None) -> str:
    """The lever of what the host did at the boundary, in the framework's words."""
    if top in _COPY_OPS:
        return COPY
    ddp = inp.framework in (Framework.DDP, Framework.TORCHREC)
    if ddp and top == "aten::flatten_dense_tensors":
        return BUFFERS
    return LEVERS.get(activity or "", OTHER)


def find(inp: FindingInput) -> Sequence[Finding]:
    rows = _known(inp.table(BOUNDARIES), inp.ranks)
    if rows.empty or inp.ranks.empty:
        return []
    steps, num_ranks = inp.num_steps, len(inp.ranks)
    stake = float(rows["idle_us"].sum()) / steps / num_ranks
    if not inp.at_stake(stake):
        return []
    outside = float(rows.loc[rows["gap_before_us"].isna(), "idle_us"].sum()) / steps / num_ranks
    doing = rows.groupby(rows["host_activity"].fillna("-"))["host_covered_us"].sum()
    doing = doing[doing.index != "-"].sort_values(ascending=False)
    named = (
        rows.groupby(rows["host_range"].fillna("-"))["host_covered_us"]
        .sum()
        .drop("-", errors="ignore")
    )
    top = str(named.idxmax()) if len(named) and named.max() > 0 else None
    activity = str(doing.index[0]) if len(doing) else None
    said = (
        f"; the host is in {top} for most of it" if top else "; no one CPU range covers most of it"
    )
    why = f"{stake:,.0f} µs/step of GPU idle at the step boundary" + (
        f", in {activity}" if activity else ""
    )
    return [
        Finding(
            FindingKind.STEP_BOUNDARY,
            stake,
            "the GPU waits at the step boundary",
            f"{stake:,.0f} µs/step of GPU idle between steps and before the first GPU op of a "
            f"step; {outside:,.0f} µs/step of it is before the first counted step's first GPU op, "
            f"in no other figure{said}",
            (Lever(_lever(inp, top, activity), why),),
            ranks=tuple(sorted(int(r) for r in rows.loc[rows["idle_us"] > 0, "rank"].unique())),
            steps=tuple(sorted(int(s) for s in rows["step"].unique())),
            phase="step boundary",
            cause="data_loading" if activity == Activity.DATA.value else "host_bound",
            evidence=_items(rows),
        )
    ]


RULE = FindingRule(
    FindingKind.STEP_BOUNDARY.value,
    "GPU idle at the step boundary",
    "GPU idle between steps and before the first counted step's first GPU op above the "
    "threshold -> what the host did there",
    find,
)
