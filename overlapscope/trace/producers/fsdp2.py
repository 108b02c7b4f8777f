"""torch FSDP2 (``fully_shard``): ``FSDP::<label> (<fqn>)`` ranges name the unit.

Collectives: the ``FSDP::all_gather (<fqn>)`` / ``FSDP::post_backward_reduce (<fqn>)``
range holding the collective gives unit and phase (forward vs backward from the context
range around it). Compute: between ``pre_forward`` / ``post_forward`` and ``pre_backward`` /
``post_backward_*`` of the unit (:mod:`overlapscope.trace.producers.compute_units`).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from overlapscope.arrays import BoolArray, IntArray, ObjArray
from overlapscope.phases import Lane, Phase
from overlapscope.trace.attribution import Labels, RowContext, holder, innermost_containing
from overlapscope.trace.naming.ranges import ROOT_UNIT
from overlapscope.trace.producers.base import LabelRole, RangeRule, cpu_only
from overlapscope.trace.producers.compute_units import (
    CLOSE_BWD,
    CLOSE_FWD,
    OPEN_BWD,
    OPEN_FWD,
    label_compute,
    regions_frame,
)

FSDP2_HOOKS = {
    "pre_forward": OPEN_FWD,
    "post_forward": CLOSE_FWD,
    "pre_backward": OPEN_BWD,
    "post_backward_accumulate": CLOSE_BWD,
    "post_backward_reshard": CLOSE_BWD,
    "post_backward_rs_wait": CLOSE_BWD,
    "post_backward_reduce": CLOSE_BWD,
}


# The labels of FSDP2's ranges: ``FSDP::<label> (<fqn>)`` (or ``FSDP::<label> for <fqn>``).
FSDP2_LABELS: dict[str, LabelRole] = {
    "all_gather": LabelRole.ISSUE_AG,
    "post_backward_reduce": LabelRole.ISSUE_RS,
    "pre_forward": LabelRole.CONTEXT_FWD,
    "forward_prefetch": LabelRole.CONTEXT_FWD,
    "post_forward": LabelRole.CONTEXT_FWD,
    "root_pre_forward": LabelRole.CONTEXT_FWD,
    "pre_backward": LabelRole.CONTEXT_BWD,
    "backward_prefetch": LabelRole.CONTEXT_BWD,
    "post_backward_accumulate": LabelRole.CONTEXT_BWD,
    "post_backward_reshard": LabelRole.CONTEXT_BWD,
    "post_backward_rs_wait": LabelRole.CONTEXT_BWD,
    "root_post_backward_callback": LabelRole.CONTEXT_BWD,
}

_FSDP2_RE = re.compile(
    r"^FSDP::(?P<label>[a-z_]+)(?: \((?P<fqn>[^()]*)\)| for (?P<target>\S*))?(?: \[pg=\d+\])?$"
)


def parse_fsdp2(name: str) -> tuple[LabelRole, str | None] | None:
    """``FSDP::all_gather (layers.0)`` -> (ISSUE_AG, "layers.0"); None if not an FSDP2 label.
    The root module's empty fqn becomes ``root``."""
    m = _FSDP2_RE.match(name)
    if m is None:
        return None
    role = FSDP2_LABELS.get(m.group("label"))
    if role is None:
        return None
    fqn = m.group("fqn") if m.group("fqn") is not None else m.group("target")
    if fqn is not None:
        fqn = fqn.replace("/", ".") or "root"
    return role, fqn


class Fsdp2:
    name = "fsdp2"
    infers_schedule = True

    def recognizes(self, cats: list[str], present: BoolArray) -> bool:
        return any(present[i] and parse_fsdp2(c) is not None for i, c in enumerate(cats))

    def rule(self, name: str) -> RangeRule | None:
        """Its all-gather and reduce ranges issue a collective."""
        parsed = parse_fsdp2(name) if name.startswith("FSDP::") else None
        if parsed is not None and parsed[0] in (LabelRole.ISSUE_AG, LabelRole.ISSUE_RS):
            return RangeRule(Lane.ISSUE)
        return None

    def label(
        self, ctx: RowContext, out: Labels, cats: list[str], codes: IntArray, warnings: list[str]
    ) -> None:
        parsed = [parse_fsdp2(c) if c.startswith("FSDP::") else None for c in cats]
        # torch >= 2.5 names each range's module, but the root's not at all
        # ("FSDP::all_gather", observed with torch 2.11): where others are named, a bare
        # hook or collective range is the root's (before 2.5 no range was named)
        named = any(f is not None and f[1] is not None for f in parsed)
        unit_of = [
            (f[1] if f[1] is not None or not named or not _per_module(c) else ROOT_UNIT)
            if f
            else None
            for f, c in zip(parsed, cats, strict=True)
        ]
        roles = np.asarray([f[0].value if f else "" for f in parsed], dtype=object)[codes]
        fqns = np.asarray(unit_of, dtype=object)[codes]
        label_fsdp2(ctx, out, roles, fqns)
        hooks = np.asarray([fsdp2_hook(c) for c in cats], dtype=object)[codes]
        label_compute(ctx, out, fsdp2_regions(ctx, cpu_only(hooks, ctx), fqns))


def _per_module(name: str) -> bool:
    """Is ``name`` a range FSDP2 opens per module (a hook or a collective), which carries the
    module's name from torch 2.5 on."""
    label = name[len("FSDP::") :].split(" ", 1)[0]
    return label in FSDP2_HOOKS or label in ("all_gather", "all_gather_copy_out")


def fsdp2_hook(name: str) -> str:
    """``FSDP::pre_forward (layers.0)`` -> ``open_fwd`` ("" for any other name)."""
    if not name.startswith("FSDP::"):
        return ""
    return FSDP2_HOOKS.get(name[len("FSDP::") :].split(" ", 1)[0], "")


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
            regions_frame(
                matched["start"].tolist(),
                matched["stop"].tolist(),
                matched["unit"].tolist(),
                matched["tid"].tolist(),
            ).assign(phase=phase.value)
        )
    if not parts:
        return pd.DataFrame(columns=["start", "end", "unit", "tid", "phase"])
    return pd.concat(parts, ignore_index=True)


def label_fsdp2(ctx: RowContext, out: Labels, roles: ObjArray, fqns: ObjArray) -> None:
    """``roles``: per-row :class:`LabelRole` value of FSDP2 ranges ("" otherwise);
    ``fqns``: per-row unit of those ranges."""
    cpu = ~ctx.on_gpu & ~ctx.on_gloo_thread
    issue = np.flatnonzero(
        cpu & np.isin(roles, [LabelRole.ISSUE_AG.value, LabelRole.ISSUE_RS.value])
    )
    context = np.flatnonzero(
        cpu & np.isin(roles, [LabelRole.CONTEXT_FWD.value, LabelRole.CONTEXT_BWD.value])
    )
    # Forward or backward: the innermost context range around each all-gather label.
    hit = innermost_containing(ctx.ts[context], ctx.end[context], ctx.ts[issue])
    in_bwd = np.zeros(len(issue), dtype=bool)
    in_bwd[hit >= 0] = roles[context[hit[hit >= 0]]] == LabelRole.CONTEXT_BWD.value
    is_rs = roles[issue] == LabelRole.ISSUE_RS.value
    out.phase[issue] = np.where(
        is_rs, Phase.RS.value, np.where(in_bwd, Phase.AG_BWD.value, Phase.AG_FWD.value)
    )
    out.unit[issue] = fqns[issue]
    held = holder(ctx, issue)
    ok = held >= 0
    out.phase[ctx.comm_rows[ok]] = out.phase[held[ok]]
    out.unit[ctx.comm_rows[ok]] = out.unit[held[ok]]
