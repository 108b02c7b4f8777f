"""The event table: one row per complete (``ph: "X"``) Kineto event of every rank.

Everything the analysis needs is parsed once into this table by :func:`overlapscope.trace.run.
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
``lane``           category    :class:`~overlapscope.phases.Lane` value: what the event is for the analysis
``phase``          category    :class:`overlapscope.phases.Phase` value or missing
``unit``           category    the FSDP unit (module path, FSDP1 order name) or missing
``kind``           category    :class:`~overlapscope.phases.CollectiveKind` for collectives, else missing
``bytes``          int64       collective payload in bytes (nccl-tests "size": the gathered
                               buffer for all-gather, the input for reduce-scatter and
                               all-reduce); -1 unknown or not a collective
``group``          category    process-group key of a collective (``args`` ``Process Group
                               Name``, ``gloo`` or ``ovs-comm``); missing otherwise
``seq``            int64       order of the collective in its group on this rank (0, 1, ...),
                               the key that matches one collective across ranks; -1 otherwise
``correlation``    int64       CUDA correlation id (launch <-> kernel); -1 when absent
=================  ==========  =============================================================

Lanes (:class:`~overlapscope.phases.Lane`):

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

import pandas as pd

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


def check_event_table(df: pd.DataFrame) -> None:
    """Raise ``ValueError`` naming the column when ``df`` does not follow the schema."""
    missing = [c for c in EVENT_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"event table lacks columns {missing}; build it with load_run()")
    for col, dtype in EVENT_COLUMNS.items():
        if str(df[col].dtype) != dtype:
            raise ValueError(f"event table column {col!r} is {df[col].dtype}, expected {dtype}")
