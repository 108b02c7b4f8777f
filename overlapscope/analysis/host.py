"""The host side of GPU work: when and from which CPU thread each GPU op was launched, and
what a CPU thread was doing over a stretch of time.

Pure functions of one rank's rows of the event table (columns ``tid, on_gpu, name, ts_us,
end_us, correlation``):

* :func:`launches`: each GPU row's launch (the CPU event with its correlation id: its start
  and thread; NaN / -1 where the trace lost it);
* :class:`HostCalls`: the rank's CPU calls by what they are (:class:`Activity`: a host sync,
  a wait for peers, data loading, the optimizer, framework hooks, other work), per thread
  as interval sets;
* :meth:`HostCalls.doing`: over ``[start, end)`` on a thread, what it was doing most, and
  the innermost CPU op at the middle of it.

The names that say what a call is (torch's own record_function names)::

    sync        cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
                cudaMemcpy (a synchronous copy), aten::_local_scalar_dense (.item()),
                aten::item (and hip*)
    collective  a CPU collective that blocks the thread on its peers: gloo:*, c10d::barrier,
                c10d::monitored_barrier, a Work's wait
    data        DataLoader (enumerate(DataLoader)#..., DataLoader.__next__ ...)
    optimizer   Optimizer.step#..., Optimizer.zero_grad#..., ovs/optim/...
    hooks       FSDP::..., FullyShardedDataParallel...., ovs/<collective>/..., autograd
                hooks
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.analysis.intervals import Intervals, covered, union
from overlapscope.arrays import BoolArray, FloatArray, IntArray
from overlapscope.trace.attribution import innermost_containing


class Activity(enum.Enum):
    """What a CPU thread was doing (the first that matches a call's name, in this order)."""

    SYNC = "sync"
    COLLECTIVE = "collective"
    DATA = "data loading"
    OPTIMIZER = "optimizer"
    HOOKS = "Python hooks"
    OTHER = "other CPU work"


_PATTERNS = {
    Activity.SYNC: re.compile(
        r"^((cuda|hip)(Stream|Device|Event|Ctx|Thread)?Synchronize"
        r"|(cuda|hip)Memcpy(2D|3D)?(ToSymbol|FromSymbol)?"
        r"|aten::_local_scalar_dense|aten::item)$"
    ),
    Activity.COLLECTIVE: re.compile(
        r"^(gloo:|c10d::(monitored_)?barrier\b|c10d::wait\b)|Work.*\bwait\b"
    ),
    Activity.DATA: re.compile(r"DataLoader|dataloader|data_loader"),
    Activity.OPTIMIZER: re.compile(r"^(Optimizer\.|ovs/optim/)|^optimizer"),
    Activity.HOOKS: re.compile(
        r"^(FSDP::|FullyShardedDataParallel\.|ovs/(ag_fwd|ag_bwd|rs|ar|limiter)|autograd::.*hook)"
        r"|[Hh]ook"
    ),
}
# The CUDA / HIP call that makes a stream wait on another stream's event.
STREAM_WAIT_RE = re.compile(r"^(cuda|hip)StreamWaitEvent$")
# What a thread was doing is told by these first when they tie (a sync before anything).
PRIORITY = tuple(Activity)


def activity_of(name: str) -> Activity:
    for activity, pattern in _PATTERNS.items():
        if pattern.search(name):
            return activity
    return Activity.OTHER


def launches(rows: pd.DataFrame) -> tuple[FloatArray, IntArray]:
    """Per row of ``rows`` (one rank's): the start and thread of its launch, the first CPU
    row with the same correlation id (NaN, -1 for CPU rows and GPU rows without one)."""
    corr = rows["correlation"].to_numpy()
    on_gpu = rows["on_gpu"].to_numpy()
    ts, tid = rows["ts_us"].to_numpy(), rows["tid"].to_numpy()
    at = np.full(len(rows), np.nan)
    thread = np.full(len(rows), -1, dtype=np.int64)
    cpu = np.flatnonzero(~on_gpu & (corr >= 0))
    gpu = np.flatnonzero(on_gpu & (corr >= 0))
    if not len(cpu) or not len(gpu):
        return at, thread
    ids, first = np.unique(corr[cpu], return_index=True)
    pos = np.minimum(np.searchsorted(ids, corr[gpu]), len(ids) - 1)
    found = ids[pos] == corr[gpu]
    src = cpu[first[pos[found]]]
    at[gpu[found]] = ts[src]
    thread[gpu[found]] = tid[src]
    return at, thread


def _name_classes(name: pd.Series) -> tuple[IntArray, BoolArray]:
    """Each row's :class:`Activity` (its index in PRIORITY) and whether it makes a stream
    wait on an event, classified once per distinct name."""
    cat = name.array if isinstance(name.array, pd.Categorical) else pd.Categorical(name)
    names = [str(c) for c in cat.categories]
    kinds = np.asarray([PRIORITY.index(activity_of(n)) for n in names] + [-1], dtype=np.int64)
    waits = np.asarray([bool(STREAM_WAIT_RE.match(n)) for n in names] + [False])
    codes = np.asarray(cat.codes, dtype=np.int64)  # -1 (missing) takes the last entries
    return kinds[codes], waits[codes]


@dataclass(frozen=True, slots=True)
class Thread:
    """One CPU thread's calls: per activity their union, its ops (for the innermost one at a
    time), and the starts of its stream-wait and launch calls, sorted."""

    by_activity: tuple[Intervals, ...]
    op_ts: FloatArray
    op_end: FloatArray
    op_name: np.ndarray
    stream_waits: FloatArray
    launch_calls: FloatArray


@dataclass(frozen=True, slots=True)
class HostCalls:
    """A rank's CPU threads (:class:`Thread` by thread id)."""

    threads: dict[int, Thread]

    @staticmethod
    def of(rows: pd.DataFrame, threads: IntArray) -> HostCalls:
        """The ``threads`` (ids) of one rank's ``rows`` (ProfilerStep ranges left out: a
        step is not something a thread does)."""
        on_cpu = ~rows["on_gpu"].to_numpy()
        tid = rows["tid"].to_numpy()
        wanted = on_cpu & np.isin(tid, threads)
        step = rows["name"].astype(str).str.startswith("ProfilerStep").to_numpy() & wanted
        keep = np.flatnonzero(wanted & ~step)
        kinds, waits = _name_classes(rows["name"].iloc[keep])
        ts, end = rows["ts_us"].to_numpy()[keep], rows["end_us"].to_numpy()[keep]
        names = rows["name"].iloc[keep].astype(str).to_numpy(dtype=object)
        corr = rows["correlation"].to_numpy()
        gpu_ids = corr[~on_cpu & (corr >= 0)]
        is_launch = np.isin(corr[keep], gpu_ids) & (corr[keep] >= 0)  # it launched GPU work
        out: dict[int, Thread] = {}
        for t in np.unique(tid[keep]).tolist():
            mine = tid[keep] == t
            sets = tuple(
                union(ts[mine & (kinds == k)], end[mine & (kinds == k)])
                for k in range(len(PRIORITY))
            )
            out[int(t)] = Thread(
                by_activity=sets,
                op_ts=ts[mine],
                op_end=end[mine],
                op_name=names[mine],
                stream_waits=np.sort(ts[mine & waits]),
                launch_calls=np.sort(ts[mine & is_launch]),
            )
        return HostCalls(out)

    def doing(
        self, tid: IntArray, start: FloatArray, end: FloatArray
    ) -> tuple[IntArray, np.ndarray, BoolArray, BoolArray]:
        """Per query ``[start, end)`` on thread ``tid``: the activity that covers most of it
        (index into PRIORITY; ties: the earlier one; OTHER when nothing covers it), the
        innermost op at its middle (None: none), and whether a sync, and a collective, was
        in progress at ``start`` (the moment the GPU ran out of work)."""
        n = len(tid)
        top = np.full(n, PRIORITY.index(Activity.OTHER), dtype=np.int64)
        op = np.full(n, None, dtype=object)
        sync_at = np.zeros(n, dtype=bool)
        peer_at = np.zeros(n, dtype=bool)
        for t, thread in self.threads.items():
            q = np.flatnonzero(tid == t)
            if not len(q):
                continue
            s, e = start[q], np.maximum(end[q], start[q])
            shares = np.stack([covered(x, s, e) for x in thread.by_activity])
            best = np.argmax(shares, axis=0)  # (the first of equal shares: the priority)
            top[q] = np.where(shares.max(axis=0) > 0, best, top[q])
            held = innermost_containing(thread.op_ts, thread.op_end, (s + e) / 2)
            op[q[held >= 0]] = thread.op_name[held[held >= 0]]
            sync_at[q] = _holds(thread.by_activity[PRIORITY.index(Activity.SYNC)], s)
            peer_at[q] = _holds(thread.by_activity[PRIORITY.index(Activity.COLLECTIVE)], s)
        return top, op, sync_at, peer_at

    def waited_on_stream(self, tid: IntArray, launch_us: FloatArray) -> BoolArray:
        """Per launch (its thread and time): did the thread make a stream wait on an event
        between its previous launch call and this one (``cudaStreamWaitEvent`` just before
        it: the op's stream waited on another stream's work)."""
        out = np.zeros(len(tid), dtype=bool)
        for t, thread in self.threads.items():
            q = np.flatnonzero((tid == t) & np.isfinite(launch_us))
            if not len(q) or not len(thread.stream_waits):
                continue
            calls = thread.launch_calls
            before = np.searchsorted(calls, launch_us[q], side="left") - 1
            prev = np.where(before >= 0, calls[np.maximum(before, 0)], -np.inf)
            w = np.searchsorted(thread.stream_waits, launch_us[q], side="right") - 1
            last_wait = np.where(w >= 0, thread.stream_waits[np.maximum(w, 0)], -np.inf)
            out[q] = last_wait > prev
        return out


def _holds(a: Intervals, t: FloatArray) -> BoolArray:
    """For each time: is it inside ``[start, end]`` of one of ``a``'s intervals (an end
    included: a sync that returned as the GPU ran dry was waiting for it)."""
    if not len(a):
        return np.zeros(len(t), dtype=bool)
    i = np.searchsorted(a.starts, t, side="right") - 1
    ok = i >= 0
    out = np.zeros(len(t), dtype=bool)
    out[ok] = t[ok] <= a.ends[i[ok]]
    return out
