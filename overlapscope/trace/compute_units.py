"""Which unit each compute event of a torch FSDP rank belongs to (``unit``, ``phase``).

A unit's forward compute runs between its forward hooks, its gradient compute between its
backward hooks; a compute event (a CPU op, or a GPU kernel by the CPU call that launched
it) belongs to the innermost such region holding it, on the same thread:

* FSDP2: ``FSDP::pre_forward (<fqn>)`` ... ``FSDP::post_forward (<fqn>)`` is ``fwd`` of
  ``<fqn>``; ``FSDP::pre_backward (<fqn>)`` ... the first ``FSDP::post_backward_* (<fqn>)``
  after it is ``bwd``. The region runs from the end of the opening hook to the start of the
  closing one.
* FSDP1: ``FullyShardedDataParallel._pre_forward`` ... ``._post_forward`` (matched by
  nesting, as module calls nest) is ``fwd``; the last ``._pre_backward_hook`` before each
  ``._post_backward_hook`` opens a ``bwd`` region. FSDP1's ranges name no module: as for its
  collectives, units are ``unit<k>`` in forward order within the step (backward in reverse
  order); forward regions beyond the number of units (an outer wrapper without parameters
  of its own) come first in the step and get no unit.

Compute outside every region keeps no unit (the bound counts it as one more "unit").
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from overlapscope.trace.attribution import Labels, RowContext, innermost_containing
from overlapscope.trace.names import Phase
from overlapscope.trace.schema import EventLane

IntArray = npt.NDArray[np.int64]
ObjArray = npt.NDArray[np.object_]

# Hook roles (per row, "" for other rows).
OPEN_FWD, CLOSE_FWD, OPEN_BWD, CLOSE_BWD = "open_fwd", "close_fwd", "open_bwd", "close_bwd"
FSDP2_HOOKS = {
    "pre_forward": OPEN_FWD,
    "post_forward": CLOSE_FWD,
    "pre_backward": OPEN_BWD,
    "post_backward_accumulate": CLOSE_BWD,
    "post_backward_reshard": CLOSE_BWD,
    "post_backward_rs_wait": CLOSE_BWD,
    "post_backward_reduce": CLOSE_BWD,
}
FSDP1_HOOKS = {
    "_pre_forward": OPEN_FWD,
    "_post_forward": CLOSE_FWD,
    "_pre_backward_hook": OPEN_BWD,
    "_post_backward_hook": CLOSE_BWD,
}


def fsdp2_hook(name: str) -> str:
    """``FSDP::pre_forward (layers.0)`` -> ``open_fwd`` ("" for any other name)."""
    if not name.startswith("FSDP::"):
        return ""
    return FSDP2_HOOKS.get(name[len("FSDP::") :].split(" ", 1)[0], "")


def fsdp1_hook(name: str) -> str:
    prefix = "FullyShardedDataParallel."
    return FSDP1_HOOKS.get(name[len(prefix) :], "") if name.startswith(prefix) else ""


def _regions(
    starts: list[float], ends: list[float], units: list[object], tids: list[int]
) -> pd.DataFrame:
    return pd.DataFrame({"start": starts, "end": ends, "unit": units, "tid": tids})


def fsdp2_regions(ctx: RowContext, hooks: ObjArray, fqns: ObjArray) -> pd.DataFrame:
    """``start, end, unit, tid, phase`` of every FSDP2 compute region."""
    rows = np.flatnonzero(hooks != "")
    df = pd.DataFrame(
        {
            "hook": hooks[rows],
            "unit": fqns[rows],
            "tid": ctx.tid[rows],
            "ts": ctx.ts[rows],
            "end": ctx.end[rows],
        }
    ).dropna(subset=["unit"])
    parts = []
    for opening, closing, phase in (
        (OPEN_FWD, CLOSE_FWD, Phase.FWD),
        (OPEN_BWD, CLOSE_BWD, Phase.BWD),
    ):
        opens = df[df["hook"] == opening].sort_values("end")
        closes = df[df["hook"] == closing].sort_values("ts")[["ts", "unit", "tid"]]
        if opens.empty or closes.empty:
            continue
        matched = pd.merge_asof(
            opens[["end", "unit", "tid"]].rename(columns={"end": "start"}),
            closes.rename(columns={"ts": "stop"}),
            left_on="start",
            right_on="stop",
            by=["unit", "tid"],
            direction="forward",
        ).dropna(subset=["stop"])
        parts.append(
            _regions(
                matched["start"].tolist(),
                matched["stop"].tolist(),
                matched["unit"].tolist(),
                matched["tid"].tolist(),
            ).assign(phase=phase.value)
        )
    if not parts:
        return pd.DataFrame(columns=["start", "end", "unit", "tid", "phase"])
    return pd.concat(parts, ignore_index=True)


def _fsdp1_forward(ctx: RowContext, rows: IntArray, hooks: ObjArray) -> list[tuple[int, int]]:
    """(open row, close row) pairs of FSDP1 forward hooks, matched by nesting per thread."""
    pairs: list[tuple[int, int]] = []
    stacks: dict[int, list[int]] = {}
    for r in rows[np.argsort(ctx.ts[rows], kind="stable")]:
        stack = stacks.setdefault(int(ctx.tid[r]), [])
        if hooks[r] == OPEN_FWD:
            stack.append(int(r))
        elif hooks[r] == CLOSE_FWD and stack:
            pairs.append((stack.pop(), int(r)))
    return pairs


def _fsdp1_backward(ctx: RowContext, rows: IntArray, hooks: ObjArray) -> list[tuple[int, int]]:
    """(open row, close row): each post-backward hook with the last pre-backward hook that
    ended before it on its thread."""
    pairs: list[tuple[int, int]] = []
    last: dict[int, int] = {}
    for r in rows[np.argsort(ctx.ts[rows], kind="stable")]:
        t = int(ctx.tid[r])
        if hooks[r] == OPEN_BWD:
            last[t] = int(r)
        elif hooks[r] == CLOSE_BWD and t in last and ctx.end[last[t]] <= ctx.ts[r]:
            pairs.append((last.pop(t), int(r)))
    return pairs


def fsdp1_regions(ctx: RowContext, hooks: ObjArray, num_units: dict[int, int]) -> pd.DataFrame:
    """``start, end, unit, tid, phase`` of FSDP1 compute regions; ``num_units``: units per
    step (from the forward all-gathers)."""
    rows = np.flatnonzero(hooks != "")
    parts = []
    for pairs, phase in (
        (_fsdp1_forward(ctx, rows, hooks), Phase.FWD),
        (_fsdp1_backward(ctx, rows, hooks), Phase.BWD),
    ):
        if not pairs:
            continue
        o = np.asarray([p[0] for p in pairs], dtype=np.int64)
        c = np.asarray([p[1] for p in pairs], dtype=np.int64)
        df = pd.DataFrame(
            {"start": ctx.end[o], "end": ctx.ts[c], "tid": ctx.tid[o], "step": ctx.step[o]}
        ).sort_values("start", kind="stable")
        k = df.groupby("step").cumcount().to_numpy()
        m = df.groupby("step")["start"].transform("size").to_numpy()
        n = df["step"].map(num_units).fillna(0).to_numpy(dtype=np.int64)
        # forward: the last n regions of the step are units 0..n-1; backward: reverse order
        idx = k - (m - n) if phase is Phase.FWD else m - 1 - k
        ok = (idx >= 0) & (idx < n)
        names = np.asarray([f"unit{i}" for i in idx], dtype=object)
        df["unit"] = np.where(ok, names, np.asarray([None] * len(names), dtype=object))
        parts.append(df.assign(phase=phase.value))
    if not parts:
        return pd.DataFrame(columns=["start", "end", "unit", "tid", "phase"])
    return pd.concat(parts, ignore_index=True)[["start", "end", "unit", "tid", "phase"]]


def label_compute(ctx: RowContext, out: Labels, regions: pd.DataFrame) -> None:
    """Give each compute row the unit and phase of the innermost region holding its anchor
    on its anchor's thread."""
    comp = np.flatnonzero((out.lane == EventLane.COMPUTE.value) & (out.unit == None))  # noqa: E711
    if len(comp) == 0 or regions.empty:
        return
    regions = regions[regions["end"] > regions["start"]]
    for t, reg in regions.groupby("tid"):
        q = comp[ctx.anchor_tid[comp] == t]
        if len(q) == 0:
            continue
        hit = innermost_containing(
            reg["start"].to_numpy(dtype=np.float64),
            reg["end"].to_numpy(dtype=np.float64),
            ctx.anchor_ts[q],
        )
        ok = hit >= 0
        out.unit[q[ok]] = reg["unit"].to_numpy(dtype=object)[hit[ok]]
        out.phase[q[ok]] = reg["phase"].to_numpy(dtype=object)[hit[ok]]


def num_forward_units(ctx: RowContext, out: Labels) -> dict[int, int]:
    """Units per step: the forward all-gathers labelled on the rank."""
    rows = ctx.comm_rows[out.phase[ctx.comm_rows] == Phase.AG_FWD.value]
    units = pd.DataFrame({"step": ctx.step[rows], "unit": out.unit[rows]}).dropna()
    return {int(s): int(n) for s, n in units.groupby("step")["unit"].nunique().items()}
