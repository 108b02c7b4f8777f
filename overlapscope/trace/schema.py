"""The event table: one row per complete (``ph: "X"``) Kineto event of every rank.

Everything the analysis needs is parsed once into this table by :func:`overlapscope.trace.
loader.load_run`; analyzers never read trace files. Times are microseconds on one clock shared
by all ranks (``baseTimeNanoseconds`` added back, then shifted so the earliest event of the run
is near 0).

=================  ==========  =============================================================
column             dtype       meaning
=================  ==========  =============================================================
``rank``           int32       global rank, from the trace's ``distributedInfo``
``step``           int64       profiler step (``ProfilerStep#N``) the event belongs to; CPU
                               events by time, GPU events by the step of the CPU call that
                               launched them (correlation id); -1: outside every step
``tid``            int64       CPU thread id; for GPU events the stream id
``stream``         int64       GPU stream (``args.stream``); -1 for CPU events
``on_gpu``         bool        a GPU activity (kernel, memcpy, memset: has ``args.stream``)
``cat``            category    Kineto category (``cpu_op``, ``kernel``, ``user_annotation`` ...)
``name``           category    event name
``ts_us``          float64     start, aligned across ranks
``dur_us``         float64     duration
``end_us``         float64     ``ts_us + dur_us``
``lane``           category    :class:`EventLane` value: what the event is for the analysis
``phase``          category    :class:`overlapscope.trace.names.Phase` value or missing
``unit``           category    the FSDP unit (module path, FSDP1 order name) or missing
``kind``           category    :class:`CollectiveKind` value for collectives, else missing
``bytes``          int64       collective payload in bytes (nccl-tests "size": the gathered
                               buffer for all-gather, the input for reduce-scatter and
                               all-reduce); -1 unknown or not a collective
``group``          category    process-group key of a collective (``args`` ``Process Group
                               Name``, ``gloo`` or ``ovs-comm``); missing otherwise
``seq``            int64       order of the collective in its group on this rank (0, 1, ...),
                               the key that matches one collective across ranks; -1 otherwise
``correlation``    int64       CUDA correlation id (launch <-> kernel); -1 when absent
=================  ==========  =============================================================

Lanes (:class:`EventLane`):

* ``compute``: what counts as compute for the rank. GPU traces: compute kernels (HTA's
  classes: not NCCL, not memory copy/set, not sync). CPU traces of overlapscope runs: the
  ``ovs/{fwd,bwd,recompute,optim}/<unit>`` ranges. Other CPU traces: ``cpu_op`` events on the
  non-communication threads, except c10d ops and waits.
* ``comm``: the transfer itself: NCCL kernels on GPU, ``gloo:*`` ops on CPU.
* ``wait``: a thread blocked on a collective (``ovs/<comm>.wait/<unit>``, ``ovs/limiter``,
  FSDP1 ``rate_limiter``).
* ``issue``: a CPU range that issues a collective (``ovs/ag_fwd/<unit>``, ``FSDP::all_gather
  (<fqn>)``, ``FullyShardedDataParallel._pre_forward`` ...).
* ``memory``: GPU memcpy / memset. ``step``: ``ProfilerStep#N``. ``other``: everything else.
"""

from __future__ import annotations

import enum

import pandas as pd

from overlapscope.trace.names import Lane

# The one lane enum lives with the phases (``names.Lane``); this name is kept for readers.
EventLane = Lane


class CollectiveKind(enum.Enum):
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_REDUCE = "all_reduce"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"  # a point-to-point transfer whose direction the trace does not say
    SEND = "send"
    RECV = "recv"
    BARRIER = "barrier"
    OTHER = "other"

    @property
    def bus_factor_num(self) -> int:
        """Numerator multiplier k of nccl-tests' bus-bandwidth factor k*(n-1)/n."""
        match self:
            case CollectiveKind.ALL_REDUCE:
                return 2
            case CollectiveKind.ALL_GATHER | CollectiveKind.REDUCE_SCATTER:
                return 1
            case CollectiveKind.ALL_TO_ALL:
                return 1
            case (
                CollectiveKind.BROADCAST
                | CollectiveKind.REDUCE
                | CollectiveKind.SEND_RECV
                | CollectiveKind.SEND
                | CollectiveKind.RECV
                | CollectiveKind.BARRIER
                | CollectiveKind.OTHER
            ):
                return 0
        raise ValueError(f"unhandled collective kind {self!r}")

    def bus_factor(self, num_ranks: int) -> float:
        """nccl-tests' busbw / algbw: 2(n-1)/n all-reduce, (n-1)/n all-gather and
        reduce-scatter, 1 for broadcast, reduce and send/recv."""
        k = self.bus_factor_num
        if k == 0 or num_ranks <= 1:
            return 1.0
        return k * (num_ranks - 1) / num_ranks


class Framework(enum.Enum):
    """Which naming the rank's trace follows (decides how units and phases are found)."""

    OVERLAPSCOPE = "overlapscope"
    FSDP2 = "fsdp2"
    FSDP1 = "fsdp1"
    GENERIC = "generic"


EVENT_COLUMNS: dict[str, str] = {
    "rank": "int32",
    "step": "int64",
    "tid": "int64",
    "stream": "int64",
    "on_gpu": "bool",
    "cat": "category",
    "name": "category",
    "ts_us": "float64",
    "dur_us": "float64",
    "end_us": "float64",
    "lane": "category",
    "phase": "category",
    "unit": "category",
    "kind": "category",
    "bytes": "int64",
    "group": "category",
    "seq": "int64",
    "correlation": "int64",
}

LANE_CATEGORIES = [lane.value for lane in EventLane]
KIND_CATEGORIES = [k.value for k in CollectiveKind]


def check_event_table(df: pd.DataFrame) -> None:
    """Raise ``ValueError`` naming the column when ``df`` does not follow the schema."""
    missing = [c for c in EVENT_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"event table lacks columns {missing}; build it with load_run()")
    for col, dtype in EVENT_COLUMNS.items():
        if str(df[col].dtype) != dtype:
            raise ValueError(f"event table column {col!r} is {df[col].dtype}, expected {dtype}")
