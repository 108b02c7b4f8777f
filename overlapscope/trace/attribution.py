"""Which unit and phase each collective belongs to (see :mod:`overlapscope.trace.labels`).

Each framework has one function that fills the ``phase`` / ``unit`` (and, for overlapscope's
comm thread, ``group``) columns of a rank in place:

* :func:`label_overlapscope`: GPU kernels by the ``ovs`` range that launched them; CPU gloo
  ops by order (the k-th op of the comm thread is the k-th ``ovs`` issue range).
* :func:`label_fsdp2`: the ``FSDP::all_gather (<fqn>)`` / ``post_backward_reduce`` range
  holding the collective; forward vs backward from the context range around it.
* :func:`label_fsdp1`: the FSDP1 label holding the collective gives the phase; units by
  order.

A collective's *anchor* is where it was issued: for a GPU kernel its launch (same correlation
id) on the launching thread, for a gloo op its own start (looked up on every non-gloo thread).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from overlapscope.trace.labels import LabelRole, expected_kinds
from overlapscope.trace.names import COPY_PHASES, Phase
from overlapscope.trace.schema import CollectiveKind, EventLane

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
ObjArray = npt.NDArray[np.object_]

OVS_COMM_GROUP = "ovs-comm"
ISSUE_PHASES = (Phase.AG_FWD, Phase.AG_BWD, Phase.RS, Phase.AR)


@dataclass(frozen=True, slots=True)
class RowContext:
    """Per-row facts of one rank (read-only) shared by the labelling functions."""

    ts: FloatArray
    end: FloatArray
    tid: IntArray
    on_gpu: BoolArray
    on_gloo_thread: BoolArray
    anchor_ts: FloatArray
    anchor_tid: IntArray
    step: IntArray
    comm_rows: IntArray


@dataclass(frozen=True, slots=True)
class Labels:
    """The per-row columns being filled (object arrays, changed in place)."""

    lane: ObjArray
    phase: ObjArray
    unit: ObjArray
    kind: ObjArray
    group: ObjArray


def innermost_containing(starts: FloatArray, ends: FloatArray, points: FloatArray) -> IntArray:
    """Index of the innermost range ``[start, end]`` holding each point, or -1.

    Ranges are profiler ranges (properly nested); they are split into nesting levels, each a
    set of disjoint ranges searched with ``searchsorted``; the deepest level that holds the
    point wins.
    """
    out = np.full(len(points), -1, dtype=np.int64)
    if len(starts) == 0 or len(points) == 0:
        return out
    s_sorted = np.sort(starts)
    e_sorted = np.sort(ends)
    # Ranges already open at a range's start (ties: earlier index counts as the parent).
    opened = np.searchsorted(s_sorted, starts, side="right")
    closed = np.searchsorted(e_sorted, starts, side="right")
    depth = opened - closed - 1
    for d in np.unique(depth):
        idx = np.flatnonzero(depth == d)
        idx = idx[np.argsort(starts[idx], kind="stable")]
        i = np.searchsorted(starts[idx], points, side="right") - 1
        ok = i >= 0
        hit = np.zeros(len(points), dtype=bool)
        hit[ok] = points[ok] <= ends[idx[i[ok]]]
        out[hit] = idx[i[hit]]
    return out


def _holder(ctx: RowContext, range_rows: IntArray) -> IntArray:
    """For each comm row: the innermost of ``range_rows`` holding its anchor (row index),
    -1 if none. GPU kernels look on their launching thread, gloo ops on every thread given."""
    comm = ctx.comm_rows
    out = np.full(len(comm), -1, dtype=np.int64)
    gpu = ctx.on_gpu[comm]
    if (~gpu).any():
        q = np.flatnonzero(~gpu)
        hit = innermost_containing(ctx.ts[range_rows], ctx.end[range_rows], ctx.anchor_ts[comm[q]])
        out[q[hit >= 0]] = range_rows[hit[hit >= 0]]
    for t in np.unique(ctx.anchor_tid[comm[gpu]]):
        q = np.flatnonzero(gpu & (ctx.anchor_tid[comm] == t))
        rng = range_rows[ctx.tid[range_rows] == t]
        hit = innermost_containing(ctx.ts[rng], ctx.end[rng], ctx.anchor_ts[comm[q]])
        out[q[hit >= 0]] = rng[hit[hit >= 0]]
    return out


def label_overlapscope(
    ctx: RowContext, out: Labels, is_ovs: BoolArray, warnings: list[str]
) -> None:
    """overlapscope runs: GPU kernels by their launching ``ovs`` range (compute kernels get
    their unit too); CPU gloo ops by issue order on the comm thread."""
    ts, tid = ctx.ts, ctx.tid
    issue_values = {p.value for p in ISSUE_PHASES}
    ovs_rows = np.flatnonzero(is_ovs & ~ctx.on_gpu)
    gpu_rows = np.flatnonzero(
        ctx.on_gpu
        & np.isin(out.lane, [EventLane.COMM.value, EventLane.COMPUTE.value, EventLane.MEMORY.value])
    )
    for t in np.unique(ctx.anchor_tid[gpu_rows]):
        rng = ovs_rows[tid[ovs_rows] == t]
        q = gpu_rows[ctx.anchor_tid[gpu_rows] == t]
        hit = innermost_containing(ts[rng], ctx.end[rng], ctx.anchor_ts[q])
        ok = hit >= 0
        out.phase[q[ok]] = out.phase[rng[hit[ok]]]
        out.unit[q[ok]] = out.unit[rng[hit[ok]]]
    # A comm kernel carries its issue phase; a compute kernel only a compute phase.
    comm_gpu = gpu_rows[out.lane[gpu_rows] == EventLane.COMM.value]
    bad = np.asarray([p not in issue_values for p in out.phase[comm_gpu]], dtype=bool)
    out.phase[comm_gpu[bad]] = None
    # A memory kernel (memcpy) carries a phase only when launched in an offload copy range.
    mem_gpu = gpu_rows[out.lane[gpu_rows] == EventLane.MEMORY.value]
    copy_values = {p.value for p in COPY_PHASES}
    not_copy = np.asarray([p not in copy_values for p in out.phase[mem_gpu]], dtype=bool)
    out.phase[mem_gpu[not_copy]] = None
    out.unit[comm_gpu[bad]] = None

    cpu_comm = ctx.comm_rows[~ctx.on_gpu[ctx.comm_rows]]
    if len(cpu_comm) == 0:
        return
    issue = ovs_rows[np.isin(out.phase[ovs_rows], list(issue_values))]
    issue = issue[np.argsort(ts[issue], kind="stable")]
    if len(issue) == 0:
        warnings.append("overlapscope ranges but no ovs issue ranges: gloo ops left unlabelled")
        return
    comm_tid = _comm_thread(ctx, out, cpu_comm, issue)
    ops = cpu_comm[(tid[cpu_comm] == comm_tid) & (ts[cpu_comm] >= ts[issue[0]])]
    ops = ops[np.argsort(ts[ops], kind="stable")]
    m = min(len(ops), len(issue))
    if len(ops) != len(issue):
        warnings.append(
            f"{len(issue)} ovs issue ranges but {len(ops)} gloo ops on the comm thread "
            f"{comm_tid}: matched the first {m} in order"
        )
    out.phase[ops[:m]] = out.phase[issue[:m]]
    out.unit[ops[:m]] = out.unit[issue[:m]]
    out.group[ops] = OVS_COMM_GROUP
    mismatch = sum(
        CollectiveKind(k) not in expected_kinds(Phase(p))
        for k, p in zip(out.kind[ops[:m]], out.phase[issue[:m]], strict=True)
    )
    if mismatch:
        warnings.append(
            f"{mismatch} of {m} gloo ops do not match the kind of their ovs issue range; "
            "per-unit figures may be shifted"
        )


def _comm_thread(ctx: RowContext, out: Labels, cpu_comm: IntArray, issue: IntArray) -> int:
    """The gloo thread whose ops, in order, best match the kinds of the issue ranges (the
    default process group may run other ops, e.g. a barrier, on its own threads)."""
    best: tuple[int, int, int] | None = None  # (kind matches, -|count difference|, tid)
    for t in np.unique(ctx.tid[cpu_comm]):
        ops = cpu_comm[(ctx.tid[cpu_comm] == t) & (ctx.ts[cpu_comm] >= ctx.ts[issue[0]])]
        m = min(len(ops), len(issue))
        ops = ops[np.argsort(ctx.ts[ops], kind="stable")][:m]
        expected = [expected_kinds(Phase(p)) for p in out.phase[issue[:m]]]
        score = sum(CollectiveKind(k) in e for k, e in zip(out.kind[ops], expected, strict=True))
        cand = (score, -abs(len(ops) - len(issue)), int(t))
        if best is None or cand > best:
            best = cand
    assert best is not None  # cpu_comm is not empty
    return best[2]


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
    holder = _holder(ctx, issue)
    ok = holder >= 0
    out.phase[ctx.comm_rows[ok]] = out.phase[holder[ok]]
    out.unit[ctx.comm_rows[ok]] = out.unit[holder[ok]]


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
    holder = _holder(ctx, labels)
    ok = holder >= 0
    rows = ctx.comm_rows[ok]
    out.phase[rows] = [FSDP1_PHASE[r] for r in roles[holder[ok]]]
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
