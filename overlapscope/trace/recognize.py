"""Turn one rank's raw columns into the event table: lanes, steps, phases, units, collectives.

All classification is done once per distinct name (categories), then broadcast to rows by
category code; range lookups (which step, which enclosing label) are ``searchsorted`` calls.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.arrays import BoolArray, CodeArray, FloatArray, IntArray, ObjArray
from overlapscope.trace.attribution import (
    Labels,
    RowContext,
    holder,
    innermost_containing,
    label_categorical,
    launch_anchor,
)
from overlapscope.trace.comm_args import collective_columns, sequence
from overlapscope.trace.labels import (
    GLOO_PREFIX,
    GPU_NON_COMPUTE_RE,
    ISSUE_OP_RE,
    MEMORY_RE,
    NCCL_KERNEL_RE,
    NCCL_RANGE_PREFIX,
    PARAM_COMMS,
    STEP_RE,
    LabelRole,
    parse_fsdp1,
    parse_fsdp2,
)
from overlapscope.trace.names import Lane, Phase, parse_range
from overlapscope.trace.p2p import P2P_CAT, fold_p2p
from overlapscope.trace.parse import RawTrace
from overlapscope.trace.producers import detect
from overlapscope.trace.schema import (
    KIND_CATEGORIES,
    LANE_CATEGORIES,
    EventLane,
    Framework,
)
from overlapscope.trace.unlaunched import cpu_steps, unlaunched_steps
from overlapscope.trace.unlaunched import warning as unlaunched_warning

PHASE_CATEGORIES = [p.value for p in Phase]
# Each lane's code in the lane column's categorical, and the lanes by code.
_LANE = {EventLane(v): i for i, v in enumerate(LANE_CATEGORIES)}
_LANE_VALUES = np.asarray(LANE_CATEGORIES, dtype=object)


class ComputeSource(enum.Enum):
    """What the ``compute`` lane of a rank is made of."""

    GPU_KERNELS = "gpu_kernels"
    OVS_RANGES = "ovs_ranges"
    CPU_OPS = "cpu_ops"


@dataclass(frozen=True, slots=True)
class RankTable:
    events: pd.DataFrame  # schema columns except ``rank`` (added by the loader)
    framework: Framework
    compute_source: ComputeSource
    steps: tuple[int, ...]
    warnings: tuple[str, ...]
    num_unlaunched: int = 0  # GPU rows whose launch the trace lost (trace/unlaunched.py)


@dataclass(frozen=True, slots=True)
class _NameClasses:
    """Per-category facts, indexed by category code."""

    is_step: BoolArray
    step_no: IntArray
    is_gloo: BoolArray
    is_nccl_kernel: BoolArray
    is_memory: BoolArray
    gpu_non_compute: BoolArray
    is_issue_op: BoolArray
    is_wait_name: BoolArray
    is_param_comms: BoolArray
    is_nccl_range: BoolArray
    ovs_phase: list[Phase | None]
    ovs_unit: list[str | None]
    fsdp2: list[tuple[LabelRole, str | None] | None]
    fsdp1: list[LabelRole | None]


def _classify_names(cats: list[str]) -> _NameClasses:
    def mask(pred: list[bool]) -> BoolArray:
        return np.asarray(pred, dtype=bool).reshape(len(cats))

    steps = [STEP_RE.match(c) for c in cats]
    ovs = [parse_range(c) if c.startswith("ovs/") else None for c in cats]
    return _NameClasses(
        is_step=mask([m is not None for m in steps]),
        step_no=np.asarray([int(m.group(1)) if m else -1 for m in steps], dtype=np.int64),
        is_gloo=mask([c.startswith(GLOO_PREFIX) for c in cats]),
        is_nccl_kernel=mask([NCCL_KERNEL_RE.match(c) is not None for c in cats]),
        is_memory=mask([MEMORY_RE.match(c) is not None for c in cats]),
        gpu_non_compute=mask([GPU_NON_COMPUTE_RE.match(c) is not None for c in cats]),
        is_issue_op=mask([ISSUE_OP_RE.match(c) is not None for c in cats]),
        is_wait_name=mask(["wait" in c.lower() for c in cats]),
        is_param_comms=mask([c == PARAM_COMMS for c in cats]),
        is_nccl_range=mask([c.startswith(NCCL_RANGE_PREFIX) for c in cats]),
        ovs_phase=[r.phase if r else None for r in ovs],
        ovs_unit=[r.unit if r else None for r in ovs],
        fsdp2=[parse_fsdp2(c) if c.startswith("FSDP::") else None for c in cats],
        fsdp1=[parse_fsdp1(c) for c in cats],
    )


def _assign_steps(
    ts: FloatArray, step_rows: IntArray, frame: pd.DataFrame, step_no: IntArray
) -> IntArray:
    out = np.full(len(ts), -1, dtype=np.int64)
    if len(step_rows) == 0:
        return out
    s = frame["ts_us"].to_numpy()[step_rows]
    e = s + frame["dur_us"].to_numpy()[step_rows]
    # Step ranges may nest (a repeated ProfilerStep#N inside another): the innermost wins.
    hit = innermost_containing(s, e, ts)
    ok = hit >= 0
    ok[ok] = ts[ok] < e[hit[ok]]
    out[ok] = step_no[hit[ok]]
    return out


def _encloses(
    ts: FloatArray, end: FloatArray, tid: IntArray, rows: BoolArray, inner: BoolArray
) -> BoolArray:
    """For each row in ``rows``: does it start at or before, and end after, the start of some
    ``inner`` row on the same thread (and is not that row)."""
    out = np.zeros(len(ts), dtype=bool)
    for t in np.unique(tid[inner]):
        starts = np.sort(ts[inner & (tid == t)])
        q = np.flatnonzero(rows & (tid == t))
        lo = np.searchsorted(starts, ts[q], side="left")
        hi = np.searchsorted(starts, end[q], side="left")
        out[q] = hi > lo
    return out


def _compute_source(on_gpu: BoolArray, is_ovs_compute: BoolArray) -> ComputeSource:
    if on_gpu.any():
        return ComputeSource.GPU_KERNELS
    if (is_ovs_compute & ~on_gpu).any():
        return ComputeSource.OVS_RANGES
    return ComputeSource.CPU_OPS


@dataclass(frozen=True, slots=True)
class _RowClasses:
    """Per-row booleans derived from the name classes."""

    is_ovs: BoolArray
    ovs_lane: CodeArray  # the lane code of an ovs range's phase (-1: not an ovs range)
    ovs_phase: ObjArray
    ovs_unit: ObjArray
    gloo_op: BoolArray
    framework_issue: BoolArray
    limiter_label: BoolArray
    issue_op: BoolArray
    wait_name: BoolArray
    step: BoolArray


def _row_classes(nc: _NameClasses, codes: IntArray, on_gpu: BoolArray) -> _RowClasses:
    ncat = len(nc.is_step)
    ovs_lane = np.asarray(
        [_LANE[EventLane(p.lane.value)] if p else -1 for p in nc.ovs_phase], dtype=np.int8
    ).reshape(ncat)
    ovs_phase = np.asarray([p.value if p else None for p in nc.ovs_phase], dtype=object)
    fsdp2_roles = [f[0] if f else None for f in nc.fsdp2]
    framework_issue = np.asarray(
        [
            (r is not None and r is not LabelRole.LIMITER)
            or (f in (LabelRole.ISSUE_AG, LabelRole.ISSUE_RS))
            for r, f in zip(nc.fsdp1, fsdp2_roles, strict=True)
        ],
        dtype=bool,
    ).reshape(ncat)
    limiter = np.asarray([r is LabelRole.LIMITER for r in nc.fsdp1], dtype=bool).reshape(ncat)
    cpu = ~on_gpu
    return _RowClasses(
        is_ovs=np.asarray([p is not None for p in nc.ovs_phase], dtype=bool).reshape(ncat)[codes],
        ovs_lane=ovs_lane[codes],
        ovs_phase=ovs_phase[codes],
        ovs_unit=np.asarray(nc.ovs_unit, dtype=object).reshape(ncat)[codes],
        gloo_op=nc.is_gloo[codes] & cpu,
        framework_issue=framework_issue[codes] & cpu,
        limiter_label=limiter[codes] & cpu,
        issue_op=nc.is_issue_op[codes] & cpu,
        wait_name=nc.is_wait_name[codes],
        step=nc.is_step[codes] & cpu,
    )


def _equals(column: pd.Series, value: str) -> BoolArray:
    """``column.astype(str).to_numpy() == value`` of a categorical of strings, from its
    codes (the strings of every row cost ~13 ms per 100,000 rows, measured)."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        return np.asarray(column.astype(str).to_numpy() == value, dtype=bool)
    at = column.cat.categories.get_indexer([value])[0]
    codes = column.cat.codes.to_numpy()
    return codes == at if at >= 0 else np.zeros(len(codes), dtype=bool)


def _lanes(
    nc: _NameClasses,
    codes: IntArray,
    rc: _RowClasses,
    frame: pd.DataFrame,
    source: ComputeSource,
    on_gloo_thread: BoolArray,
) -> CodeArray:
    """The ``lane`` of every row (see the schema) as its code in :data:`LANE_CATEGORIES`
    (the categorical's codes: no column of strings hashed again); later assignments win."""
    on_gpu = frame["on_gpu"].to_numpy()
    ts = frame["ts_us"].to_numpy()
    end = ts + frame["dur_us"].to_numpy()
    tid = frame["tid"].to_numpy()
    lane = np.full(len(frame), _LANE[EventLane.OTHER], dtype=np.int8)
    # GPU: HTA's kernel classes.
    gpu_comm = on_gpu & nc.is_nccl_kernel[codes]
    gpu_mem = on_gpu & ~gpu_comm & nc.is_memory[codes]
    lane[on_gpu & ~nc.gpu_non_compute[codes] & ~gpu_mem] = _LANE[EventLane.COMPUTE]
    lane[gpu_mem] = _LANE[EventLane.MEMORY]
    lane[gpu_comm] = _LANE[EventLane.COMM]
    cpu = ~on_gpu
    if source is ComputeSource.CPU_OPS:
        compute = (
            cpu
            & _equals(frame["cat"], "cpu_op")
            & ~on_gloo_thread
            & ~rc.issue_op
            & ~rc.wait_name
            & ~rc.is_ovs
        )
        blocking = rc.framework_issue | rc.issue_op | rc.limiter_label
        # An op that encloses a collective's issue (autograd hook wrappers, module calls)
        # also encloses the thread's wait on it: only its children count as compute.
        compute &= ~_encloses(ts, end, tid, compute, blocking)
        lane[compute] = _LANE[EventLane.COMPUTE]
    lane[rc.framework_issue | rc.issue_op] = _LANE[EventLane.ISSUE]
    lane[rc.limiter_label] = _LANE[EventLane.WAIT]
    ovs_cpu = cpu & rc.is_ovs
    # an ovs range's lane is its phase's (issue, wait, memory for offload copies)
    for ovs_lane in (Lane.ISSUE, Lane.WAIT, Lane.MEMORY):
        code = _LANE[EventLane(ovs_lane.value)]
        lane[ovs_cpu & (rc.ovs_lane == code)] = code
    if source is ComputeSource.OVS_RANGES:
        lane[ovs_cpu & (rc.ovs_lane == _LANE[EventLane.COMPUTE])] = _LANE[EventLane.COMPUTE]
    lane[rc.gloo_op] = _LANE[EventLane.COMM]
    lane[rc.step] = _LANE[EventLane.STEP]
    return lane


def _table(
    frame: pd.DataFrame, lane: CodeArray, out: Labels, numbers: tuple[IntArray, IntArray, IntArray]
) -> pd.DataFrame:
    """The rank's event table (schema columns but ``rank``); ``lane``: the lanes' codes,
    ``numbers``: each row's step, bytes and sequence number."""
    step, nbytes, seq = numbers
    ts = frame["ts_us"].to_numpy()
    return pd.DataFrame(
        {
            "step": step,
            "tid": frame["tid"].to_numpy(),
            "stream": frame["stream"].to_numpy(),
            "on_gpu": frame["on_gpu"].to_numpy(),
            "cat": frame["cat"],
            "name": frame["name"],
            "ts_us": ts,
            "dur_us": frame["dur_us"].to_numpy(),
            "end_us": ts + frame["dur_us"].to_numpy(),
            "lane": pd.Categorical.from_codes(lane, categories=LANE_CATEGORIES),
            "phase": label_categorical(out.phase, PHASE_CATEGORIES),
            "unit": label_categorical(out.unit),
            "kind": label_categorical(out.kind, KIND_CATEGORIES),
            "bytes": nbytes,
            "group": label_categorical(out.group),
            "seq": seq,
            "correlation": frame["correlation"].to_numpy(),
        },
        copy=False,  # the columns as they are: stacking them into 2-D blocks copied them all
    )


def _steps(
    frame: pd.DataFrame,
    is_step: BoolArray,
    step_no: IntArray,
    anchor_ts: FloatArray,
    orphan: BoolArray,
    warnings: list[str],
) -> tuple[IntArray, tuple[int, ...]]:
    """Each row's step (CPU events by time, GPU events by the step of their launch) and the
    rank's steps."""
    step_rows = np.flatnonzero(is_step)
    step_nos = step_no[step_rows]
    step = _assign_steps(anchor_ts, step_rows, frame, step_nos)
    step[step_rows] = step_nos
    steps = tuple(sorted(set(step_nos.tolist())))
    if len(steps) != len(step_nos):
        warnings.append("repeated ProfilerStep numbers; steps were merged by number")
    if orphan.any():
        ts, dur = frame["ts_us"].to_numpy(), frame["dur_us"].to_numpy()
        cpu = cpu_steps(step_nos, ts[step_rows], ts[step_rows] + dur[step_rows])
        step[orphan] = unlaunched_steps(ts, frame["stream"].to_numpy(), step, orphan, cpu)
        warnings.append(unlaunched_warning(int(orphan.sum()), int((step[orphan] >= 0).sum())))
    return step, steps


def _on_gloo_thread(raw: RawTrace, gloo_op: BoolArray) -> BoolArray:
    """Rows on a gloo worker thread (one that runs gloo ops, or is named so)."""
    tid = raw.events["tid"].to_numpy()
    # Folded point-to-point collectives sit on the issuing (training) thread: not a gloo thread.
    not_p2p = (raw.events["cat"] != P2P_CAT).to_numpy()
    gloo_tids = set(np.unique(tid[gloo_op & not_p2p]).tolist()) | {
        t for t, name in raw.thread_names.items() if "gloo" in name
    }
    return np.isin(tid, np.asarray(sorted(gloo_tids), dtype=np.int64))


def _issuers(ctx: RowContext, nc: _NameClasses, codes: IntArray) -> tuple[IntArray, IntArray]:
    """Per collective row: the ``record_param_comms`` op that issued it and the ``nccl:<op>``
    range around its launch (rows; -1: none), whose arguments and names tell what the
    collective's own may not (comm_args.collective_columns)."""
    cpu = ~ctx.on_gpu
    return (
        holder(ctx, np.flatnonzero(nc.is_param_comms[codes] & cpu)),
        holder(ctx, np.flatnonzero(nc.is_nccl_range[codes] & cpu)),
    )


def recognize(raw: RawTrace, world_size: int) -> RankTable:
    """Build one rank's event table (without the ``rank`` column) from its raw columns."""
    raw = fold_p2p(raw, world_size)  # the engine's gloo send/recv -> one event per collective
    frame = raw.events
    n = len(frame)
    warnings: list[str] = []
    name_cat = pd.Categorical(frame["name"])
    cats = [str(c) for c in name_cat.categories]
    codes = np.asarray(name_cat.codes, dtype=np.int64)
    nc = _classify_names(cats)
    present = np.bincount(codes[codes >= 0], minlength=len(cats)) > 0
    producer = detect(cats, present)
    on_gpu = frame["on_gpu"].to_numpy()
    tid = frame["tid"].to_numpy()
    ts = frame["ts_us"].to_numpy()
    end = ts + frame["dur_us"].to_numpy()
    rc = _row_classes(nc, codes, on_gpu)
    source = _compute_source(on_gpu, rc.ovs_lane == _LANE[EventLane.COMPUTE])
    on_gloo_thread = _on_gloo_thread(raw, rc.gloo_op)

    lane = _lanes(nc, codes, rc, frame, source, on_gloo_thread)
    out = Labels(
        lane=_LANE_VALUES[lane],  # (read, not changed, by the producers)
        phase=rc.ovs_phase,  # None where the name is not an ovs range (rc's own arrays:
        unit=rc.ovs_unit,  # filled in place from here on)
        kind=np.full(n, None, dtype=object),
        group=np.full(n, None, dtype=object),
    )
    out.phase[rc.limiter_label] = Phase.LIMITER.value

    anchor_ts, anchor_tid, orphan = launch_anchor(frame)
    step, steps = _steps(frame, rc.step, nc.step_no[codes], anchor_ts, orphan, warnings)

    comm_rows = np.flatnonzero(lane == _LANE[EventLane.COMM])
    ctx = RowContext(
        *(ts, end, tid, on_gpu, on_gloo_thread), anchor_ts, anchor_tid, step, comm_rows
    )
    issuer = _issuers(ctx, nc, codes)
    nbytes = collective_columns(
        raw.comm_args, cats, codes, comm_rows, out, on_gpu, world_size, issuer
    )
    producer.label(ctx, out, cats, codes, warnings)

    if len(comm_rows) == 0:
        warnings.append(
            "no communication found (no NCCL kernels, no gloo ops): "
            "only compute and idle time can be reported"
        )
    if not steps:
        warnings.append("no ProfilerStep ranges: the whole trace is counted as one step")

    seq = sequence(comm_rows, out.group, step, ts)
    table = _table(frame, lane, out, (step, nbytes, seq))
    lost = int(orphan.sum())
    return RankTable(table, producer.framework, source, steps, tuple(warnings), lost)
