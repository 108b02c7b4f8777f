"""torch FSDP1 (``FullyShardedDataParallel``): its ranges name no module.

Collectives: the innermost FSDP1 hook range holding the collective gives the phase; units
are ``unit<k>`` in forward all-gather order within each step (backward in reverse order).
Compute: between ``_pre_forward`` / ``_post_forward`` (matched by nesting) and
``_pre_backward_hook`` / ``_post_backward_hook``, numbered the same way.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from overlapscope.arrays import BoolArray, IntArray, ObjArray
from overlapscope.phases import Lane, Phase
from overlapscope.trace.attribution import Labels, RowContext, holder
from overlapscope.trace.producers.base import LabelRole, RangeRule, cpu_only
from overlapscope.trace.producers.compute_units import (
    CLOSE_BWD,
    CLOSE_FWD,
    OPEN_BWD,
    OPEN_FWD,
    label_compute,
)

FSDP1_HOOKS = {
    "_pre_forward": OPEN_FWD,
    "_post_forward": CLOSE_FWD,
    "_pre_backward_hook": OPEN_BWD,
    "_post_backward_hook": CLOSE_BWD,
}


# The labels of FSDP1's ranges: ``FullyShardedDataParallel.<label>``.
FSDP1_LABELS: dict[str, LabelRole] = {
    "_pre_forward": LabelRole.ISSUE_AG_FWD,
    "_pre_forward_prefetch": LabelRole.ISSUE_AG_FWD,
    "_pre_backward_hook": LabelRole.ISSUE_AG_BWD,
    "_pre_backward_prefetch": LabelRole.ISSUE_AG_BWD,
    "_post_backward_prefetch": LabelRole.ISSUE_AG_BWD,
    "_post_backward_hook": LabelRole.ISSUE_RS,
    "rate_limiter": LabelRole.LIMITER,
}

_FSDP1_PREFIX = "FullyShardedDataParallel."


def parse_fsdp1(name: str) -> LabelRole | None:
    if not name.startswith(_FSDP1_PREFIX):
        return None
    return FSDP1_LABELS.get(name[len(_FSDP1_PREFIX) :])


class Fsdp1:
    name = "fsdp1"
    infers_schedule = True

    def recognizes(self, cats: list[str], present: BoolArray) -> bool:
        return any(present[i] and parse_fsdp1(c) is not None for i, c in enumerate(cats))

    def rule(self, name: str) -> RangeRule | None:
        """Its hook ranges issue collectives; its rate limiter holds the thread."""
        match parse_fsdp1(name):
            case None:
                return None
            case LabelRole.LIMITER:
                return RangeRule(Lane.WAIT, Phase.LIMITER)
            case _:
                return RangeRule(Lane.ISSUE)

    def label(
        self, ctx: RowContext, out: Labels, cats: list[str], codes: IntArray, warnings: list[str]
    ) -> None:
        roles = np.asarray([(r.value if (r := parse_fsdp1(c)) else "") for c in cats], dtype=object)
        label_fsdp1(ctx, out, roles[codes])
        hooks = np.asarray([fsdp1_hook(c) for c in cats], dtype=object)[codes]
        units = num_forward_units(ctx, out)
        label_compute(ctx, out, fsdp1_regions(ctx, cpu_only(hooks, ctx), units))


def fsdp1_hook(name: str) -> str:
    prefix = _FSDP1_PREFIX
    return FSDP1_HOOKS.get(name[len(prefix) :], "") if name.startswith(prefix) else ""


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


def num_forward_units(ctx: RowContext, out: Labels) -> dict[int, int]:
    """Units per step: the forward all-gathers labelled on the rank."""
    rows = ctx.comm_rows[out.phase[ctx.comm_rows] == Phase.AG_FWD.value]
    units = pd.DataFrame({"step": ctx.step[rows], "unit": out.unit[rows]}).dropna()
    return {int(s): int(n) for s, n in units.groupby("step")["unit"].nunique().items()}


FSDP1_PHASE = {
    LabelRole.ISSUE_AG_FWD.value: Phase.AG_FWD.value,
    LabelRole.ISSUE_AG_BWD.value: Phase.AG_BWD.value,
    LabelRole.ISSUE_RS.value: Phase.RS.value,
}


def label_fsdp1(ctx: RowContext, out: Labels, roles: ObjArray) -> None:
    """``roles``: per-row :class:`LabelRole` value of FSDP1 ranges ("" otherwise). Units are
    ``unit<k>`` in forward all-gather order within each step; backward all-gathers and
    reduce-scatters take them in reverse order."""
    labels = np.flatnonzero(~ctx.on_gpu & ~ctx.on_gloo_thread & np.isin(roles, list(FSDP1_PHASE)))
    held = holder(ctx, labels)
    ok = held >= 0
    rows = ctx.comm_rows[ok]
    out.phase[rows] = [FSDP1_PHASE[r] for r in roles[held[ok]]]
    out.phase[labels] = [FSDP1_PHASE[r] for r in roles[labels]]
    order = pd.DataFrame(
        {"row": rows, "phase": out.phase[rows], "step": ctx.step[rows], "t": ctx.ts[rows]}
    ).sort_values("t", kind="stable")
    order["k"] = order.groupby(["step", "phase"], sort=False).cumcount()
    forward = order[order["phase"] == Phase.AG_FWD.value]
    num_units = forward.groupby("step")["k"].max().add(1)
    order["num_units"] = order["step"].map(num_units).fillna(0).astype(np.int64)
    is_fwd = (order["phase"] == Phase.AG_FWD.value).to_numpy()
    k = order["k"].to_numpy()
    idx = np.where(is_fwd, k, order["num_units"].to_numpy() - 1 - k)
    good = idx >= 0
    out.unit[order["row"].to_numpy()[good]] = [f"unit{i}" for i in idx[good]]
