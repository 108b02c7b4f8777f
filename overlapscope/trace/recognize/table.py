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
from overlapscope.phases import KIND_CATEGORIES, LANE_CATEGORIES, PHASE_CATEGORIES, Lane
from overlapscope.trace.attribution import (
    Labels,
    RowContext,
    holder,
    innermost_containing,
    label_categorical,
    launch_anchor,
)
from overlapscope.trace.groups import assign as groups
from overlapscope.trace.groups import dimensions
from overlapscope.trace.naming.generic import (
    GLOO_PREFIX,
    GPU_NON_COMPUTE_RE,
    ISSUE_OP_RE,
    MEMORY_RE,
    NCCL_KERNEL_RE,
    NCCL_RANGE_PREFIX,
    PARAM_COMMS,
    STEP_RE,
    WAIT_OP_RE,
)
from overlapscope.trace.producers import detect
from overlapscope.trace.producers.base import Producer, RangeRule
from overlapscope.trace.read.comm_args import collective_columns, sequence
from overlapscope.trace.read.parse import RawTrace
from overlapscope.trace.recognize.collective_copies import collective_copies
from overlapscope.trace.recognize.p2p import P2P_CAT, fold_p2p
from overlapscope.trace.recognize.unlaunched import cpu_steps, unlaunched_steps
from overlapscope.trace.recognize.unlaunched import warning as unlaunched_warning

# Each lane's code in the lane column's categorical, and the lanes by code.
_LANE = {Lane(v): i for i, v in enumerate(LANE_CATEGORIES)}
_LANE_VALUES = np.asarray(LANE_CATEGORIES, dtype=object)


class ComputeSource(enum.Enum):
    """What the ``compute`` lane of a rank is made of."""

    GPU_KERNELS = "gpu_kernels"
    OVS_RANGES = "ovs_ranges"  # the producer's own compute ranges (overlapscope's ``ovs``)
    CPU_OPS = "cpu_ops"


@dataclass(frozen=True, slots=True)
class RankTable:
    events: pd.DataFrame  # schema columns except ``rank`` (added by the loader)
    framework: str  # the producer's name
    compute_source: ComputeSource
    steps: tuple[int, ...]
    warnings: tuple[str, ...]
    num_unlaunched: int = 0  # GPU rows whose launch the trace lost (trace/recognize/unlaunched.py)


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
    is_wait_op: BoolArray  # a wait on a collective wherever it sits (labels.WAIT_OP_RE)
    is_param_comms: BoolArray
    is_nccl_range: BoolArray
    rules: list[RangeRule | None]  # the producer's rule of each name


def _classify_names(cats: list[str], producer: Producer) -> _NameClasses:
    def mask(pred: list[bool]) -> BoolArray:
        return np.asarray(pred, dtype=bool).reshape(len(cats))

    steps = [STEP_RE.match(c) for c in cats]
    return _NameClasses(
        is_step=mask([m is not None for m in steps]),
        step_no=np.asarray([int(m.group(1)) if m else -1 for m in steps], dtype=np.int64),
        is_gloo=mask([c.startswith(GLOO_PREFIX) for c in cats]),
        is_nccl_kernel=mask([NCCL_KERNEL_RE.match(c) is not None for c in cats]),
        is_memory=mask([MEMORY_RE.match(c) is not None for c in cats]),
        gpu_non_compute=mask([GPU_NON_COMPUTE_RE.match(c) is not None for c in cats]),
        is_issue_op=mask([ISSUE_OP_RE.match(c) is not None for c in cats]),
        is_wait_name=mask(["wait" in c.lower() for c in cats]),
        is_wait_op=mask([WAIT_OP_RE.match(c) is not None for c in cats]),
        is_param_comms=mask([c == PARAM_COMMS for c in cats]),
        is_nccl_range=mask([c.startswith(NCCL_RANGE_PREFIX) for c in cats]),
        rules=[producer.rule(c) for c in cats],
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


def _compute_source(on_gpu: BoolArray, is_range_compute: BoolArray) -> ComputeSource:
    if on_gpu.any():
        return ComputeSource.GPU_KERNELS
    if (is_range_compute & ~on_gpu).any():
        return ComputeSource.OVS_RANGES
    return ComputeSource.CPU_OPS


@dataclass(frozen=True, slots=True)
class _RowClasses:
    """Per-row facts derived from the name classes."""

    ruled: BoolArray  # a CPU row whose name the producer has a rule for
    rule_lane: CodeArray  # the lane code of the rule (-1: no rule)
    rule_phase: ObjArray  # the phase value the rule gives (None: none)
    rule_unit: ObjArray
    gloo_op: BoolArray
    issue_op: BoolArray
    wait_name: BoolArray
    wait_op: BoolArray
    step: BoolArray

    def lane_is(self, lane: Lane) -> BoolArray:
        return self.ruled & (self.rule_lane == _LANE[lane])


def _row_classes(nc: _NameClasses, codes: IntArray, on_gpu: BoolArray) -> _RowClasses:
    ncat = len(nc.is_step)
    rules = nc.rules
    lanes = np.asarray([_LANE[r.lane] if r else -1 for r in rules], dtype=np.int8).reshape(ncat)
    phases = np.asarray([r.phase.value if r and r.phase else None for r in rules], dtype=object)
    units = np.asarray([r.unit if r else None for r in rules], dtype=object).reshape(ncat)
    cpu = ~on_gpu
    ruled = np.asarray([r is not None for r in rules], dtype=bool).reshape(ncat)[codes] & cpu
    rule_phase, rule_unit = phases.reshape(ncat)[codes], units[codes]  # (fresh arrays)
    rule_phase[~ruled] = rule_unit[~ruled] = None  # (a rule is for CPU rows only)
    return _RowClasses(
        ruled=ruled,
        rule_lane=np.where(ruled, lanes[codes], np.int8(-1)),
        rule_phase=rule_phase,
        rule_unit=rule_unit,
        gloo_op=nc.is_gloo[codes] & cpu,
        issue_op=nc.is_issue_op[codes] & cpu,
        wait_name=nc.is_wait_name[codes],
        wait_op=nc.is_wait_op[codes] & cpu,
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
    lane = np.full(len(frame), _LANE[Lane.OTHER], dtype=np.int8)
    # GPU: HTA's kernel classes.
    gpu_comm = on_gpu & nc.is_nccl_kernel[codes]
    gpu_mem = on_gpu & ~gpu_comm & nc.is_memory[codes]
    lane[on_gpu & ~nc.gpu_non_compute[codes] & ~gpu_mem] = _LANE[Lane.COMPUTE]
    lane[gpu_mem] = _LANE[Lane.MEMORY]
    lane[gpu_comm] = _LANE[Lane.COMM]
    cpu = ~on_gpu
    if source is ComputeSource.CPU_OPS:
        compute = (
            cpu
            & _equals(frame["cat"], "cpu_op")
            & ~on_gloo_thread
            & ~rc.issue_op
            & ~rc.wait_name
            & ~rc.ruled
        )
        blocking = rc.lane_is(Lane.ISSUE) | rc.issue_op | rc.lane_is(Lane.WAIT) | rc.wait_op
        # An op that encloses a collective's issue (autograd hook wrappers, module calls)
        # also encloses the thread's wait on it: only its children count as compute.
        compute &= ~_encloses(ts, end, tid, compute, blocking)
        lane[compute] = _LANE[Lane.COMPUTE]
    lane[rc.issue_op] = _LANE[Lane.ISSUE]
    # a producer's range takes its rule's lane (issue, wait, memory for offload copies) ...
    lane[rc.wait_op] = _LANE[Lane.WAIT]
    for ruled_lane in (Lane.ISSUE, Lane.WAIT, Lane.MEMORY):
        lane[rc.lane_is(ruled_lane)] = _LANE[ruled_lane]
    if source is ComputeSource.OVS_RANGES:  # ... and its compute ranges make the compute
        lane[rc.lane_is(Lane.COMPUTE)] = _LANE[Lane.COMPUTE]
    lane[rc.gloo_op] = _LANE[Lane.COMM]
    lane[rc.step] = _LANE[Lane.STEP]
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
        step[orphan] = unlaunched_steps(ts, orphan, cpu)
        num_counted = int((step[orphan] >= 0).sum()) if steps else int(orphan.sum())
        warnings.append(unlaunched_warning(int(orphan.sum()), num_counted, len(steps)))
    return step, steps


def _issued_by(raw: RawTrace, n: int) -> IntArray:
    out = np.full(n, -1, dtype=np.int64)
    if raw.folded_issue is not None:
        folded, issue = raw.folded_issue
        out[folded] = issue
    return out


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


def _absent(has_comm: bool, has_steps: bool) -> list[str]:
    """The warnings for what a rank's trace lacks."""
    out = []
    if not has_comm:
        out.append(
            "no communication found (no NCCL kernels or copies, no gloo ops): "
            "only compute and idle time can be reported"
        )
    if not has_steps:
        out.append("no ProfilerStep ranges: the whole trace is counted as one step")
    return out


def recognize(raw: RawTrace, world_size: int) -> RankTable:
    """Build one rank's event table (without the ``rank`` column) from its raw columns."""
    raw = fold_p2p(raw, world_size)  # the engine's gloo send/recv -> one event per collective
    frame = raw.events
    n = len(frame)
    warnings: list[str] = []
    name_cat = pd.Categorical(frame["name"])
    cats = [str(c) for c in name_cat.categories]
    codes = np.asarray(name_cat.codes, dtype=np.int64)
    present = np.bincount(codes[codes >= 0], minlength=len(cats)) > 0
    producer = detect(cats, present)
    nc = _classify_names(cats, producer)
    on_gpu = frame["on_gpu"].to_numpy()
    tid = frame["tid"].to_numpy()
    ts = frame["ts_us"].to_numpy()
    end = ts + frame["dur_us"].to_numpy()
    rc = _row_classes(nc, codes, on_gpu)
    source = _compute_source(on_gpu, rc.lane_is(Lane.COMPUTE))
    on_gloo_thread = _on_gloo_thread(raw, rc.gloo_op)

    lane = _lanes(nc, codes, rc, frame, source, on_gloo_thread)
    anchor_ts, anchor_tid, orphan = launch_anchor(frame)
    anchors = (anchor_ts, anchor_tid)
    copies, comm_args = collective_copies(raw, nc.is_memory[codes], anchors, cats, codes)
    lane[copies] = _LANE[Lane.COMM]  # NCCL's copies are the collective
    out = Labels(
        lane=_LANE_VALUES[lane],  # (read, not changed, by the producers)
        phase=rc.rule_phase,  # None where no rule names one (rc's own arrays: filled in
        unit=rc.rule_unit,  # place from here on)
        kind=np.full(n, None, dtype=object),
        group=np.full(n, None, dtype=object),
    )

    step, steps = _steps(frame, rc.step, nc.step_no[codes], anchor_ts, orphan, warnings)

    comm_rows = np.flatnonzero(lane == _LANE[Lane.COMM])
    ctx = RowContext(
        *(ts, end, tid, on_gpu, on_gloo_thread, anchor_ts, anchor_tid, step, comm_rows),
        issued_by=_issued_by(raw, n),
    )
    issuer = _issuers(ctx, nc, codes)
    nbytes = collective_columns(comm_args, cats, codes, comm_rows, out, on_gpu, world_size, issuer)
    where, order = (raw.rank or 0, world_size, raw.groups, issuer[0]), ts.copy()
    warnings += groups.apply(ctx, out, nbytes, comm_args, (cats, codes), where, order)
    producer.label(ctx, out, cats, codes, warnings)
    dimensions.label(ctx, out, np.flatnonzero(rc.wait_op))  # HSDP replicas, TP by block

    warnings += _absent(len(comm_rows) > 0, bool(steps))
    seq = sequence(comm_rows, out.group, step, order)
    table = _table(frame, lane, out, (step, nbytes, seq))
    lost = int(orphan.sum())
    return RankTable(table, producer.name, source, steps, tuple(warnings), lost)
