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
  the innermost CPU range covering most of it (a stretch is named by the range it lies in,
  an op inside that range only where the op covers most of the stretch).

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
import functools
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.analysis.intervals import Intervals, covered, union
from overlapscope.arrays import BoolArray, FloatArray, IntArray
from overlapscope.trace.attribution import launch_rows


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


# Any of them (one search per name: most names, aten ops, match none).
_ANY = re.compile("|".join(f"(?:{p.pattern})" for p in _PATTERNS.values()))


@functools.lru_cache(maxsize=65536)  # (a worker classifies the same names rank after rank)
def activity_of(name: str) -> Activity:
    if not _ANY.search(name):
        return Activity.OTHER
    for activity, pattern in _PATTERNS.items():
        if pattern.search(name):
            return activity
    return Activity.OTHER


@dataclass(frozen=True, slots=True)
class Launches:
    """Per row of one rank's rows: the start (``at``) and thread (``tid``) of its launch, the
    first CPU row with the same correlation id (NaN, -1 for CPU rows and GPU rows without
    one)."""

    at: FloatArray
    tid: IntArray
    source: BoolArray  # the CPU rows that launched GPU work


def launches(rows: pd.DataFrame) -> Launches:
    """:class:`Launches` of one rank's ``rows``."""
    corr = rows["correlation"].to_numpy()
    on_gpu = rows["on_gpu"].to_numpy()
    ts, tid = rows["ts_us"].to_numpy(), rows["tid"].to_numpy()
    at = np.full(len(rows), np.nan)
    thread = np.full(len(rows), -1, dtype=np.int64)
    source = np.zeros(len(rows), dtype=bool)
    gpu, src = launch_rows(corr, on_gpu)
    at[gpu] = ts[src]
    thread[gpu] = tid[src]
    source[src] = True
    return Launches(at, thread, source)


@dataclass(frozen=True, slots=True)
class Names:
    """The event names of one rank's rows as codes into ``names``, with what each name is
    (classified once per distinct name): a stream wait, a profiler step; its
    :class:`Activity` when asked (:meth:`activities`)."""

    codes: IntArray
    names: np.ndarray
    stream_wait: BoolArray
    step: BoolArray

    @staticmethod
    def of(column: pd.Series) -> Names:
        cat = column.array if isinstance(column.array, pd.Categorical) else pd.Categorical(column)
        names = [str(c) for c in cat.categories.tolist()]
        codes = np.asarray(cat.codes, dtype=np.int64)
        return Names(
            codes=np.where(codes >= 0, codes, len(names)),  # missing: the extra last entry
            names=np.asarray([*names, None], dtype=object),
            stream_wait=np.asarray([bool(STREAM_WAIT_RE.match(n)) for n in names] + [False]),
            step=np.asarray([n.startswith("ProfilerStep") for n in names] + [False]),
        )

    def activities(self, codes: IntArray) -> IntArray:
        """The :class:`Activity` of each code (index into PRIORITY; -1: missing), each
        distinct name classified once (only the CPU ops' names: not the GPU kernels')."""
        present = np.zeros(len(self.names), dtype=bool)  # (no sort of the codes)
        present[codes] = True
        table = np.full(len(self.names), -1, dtype=np.int64)
        for c in np.flatnonzero(present).tolist():
            name = self.names[c]
            table[c] = PRIORITY.index(activity_of(name)) if name is not None else -1
        return table[codes]

    def at(self, rows: IntArray) -> np.ndarray:
        """The names of the rows at ``rows`` (objects)."""
        return self.names[self.codes[rows]]


@dataclass(frozen=True, slots=True)
class Nesting:
    """Properly nested ranges (a thread's ops) by nesting level, each level's ranges sorted
    by start: the ranges holding a point are found by a binary search per level (the levels
    built once)."""

    levels: tuple[tuple[FloatArray, FloatArray, IntArray], ...]  # (starts, ends, index)

    @staticmethod
    def of(starts: FloatArray, ends: FloatArray) -> Nesting:
        if not len(starts):
            return Nesting(())
        opened = np.searchsorted(np.sort(starts), starts, side="right")
        closed = np.searchsorted(np.sort(ends), starts, side="right")
        depth = opened - closed - 1
        levels = []
        for d in np.unique(depth).tolist():
            idx = np.flatnonzero(depth == d)
            idx = idx[np.argsort(starts[idx], kind="stable")]
            levels.append((starts[idx], ends[idx], idx))
        return Nesting(tuple(levels))

    def covering(self, start: FloatArray, end: FloatArray) -> IntArray:
        """Index of the innermost range covering at least half of each ``[start, end]``, or
        -1. Such a range holds the stretch's middle (one that does not lies on one side of
        it and covers half at most), so only the ranges holding the middle are tried, one per
        level; a deeper level wins where it covers enough."""
        middle = (start + end) / 2
        half = 0.5 * (end - start)
        out = np.full(len(middle), -1, dtype=np.int64)
        for s, e, idx in self.levels:  # (shallow to deep: a deeper level wins)
            i = np.searchsorted(s, middle, side="right") - 1
            ok = np.flatnonzero(i >= 0)
            j = i[ok]
            over = np.minimum(e[j], end[ok]) - np.maximum(s[j], start[ok])
            hit = (middle[ok] <= e[j]) & (over >= half[ok])
            out[ok[hit]] = idx[j[hit]]
        return out


@dataclass(frozen=True, slots=True)
class Thread:
    """One CPU thread's calls: per named activity (all but OTHER) their union and the union
    of them all, its ops (start, end, name code; their nesting built when first asked),
    and the starts of its stream-wait and launch calls, sorted."""

    by_activity: tuple[Intervals, ...]
    named: Intervals
    op_ts: FloatArray
    op_end: FloatArray
    op_code: IntArray
    stream_waits: FloatArray
    launch_calls: FloatArray

    def covering(self, start: FloatArray, end: FloatArray) -> IntArray:
        """Per query ``[start, end)``: the innermost op covering most (at least half) of it
        (index into the thread's ops; -1: none), so that a stretch is named by the range it
        lies in (a DataLoader's ``__next__``, a module's forward, the optimizer's step), and
        by an op inside it only where that op covers most of the stretch. Only the ops that
        hold a middle are nested (the chains of ranges around the few middles: never the
        whole thread)."""
        middle = (start + end) / 2
        if not len(middle):
            return np.zeros(0, dtype=np.int64)
        points = np.sort(middle)
        first = np.searchsorted(points, self.op_ts, side="left")
        ok = first < len(points)
        near = np.flatnonzero(ok & (points[np.minimum(first, len(points) - 1)] <= self.op_end))
        if not len(near):
            return np.full(len(middle), -1, dtype=np.int64)
        held = Nesting.of(self.op_ts[near], self.op_end[near]).covering(start, end)
        return np.where(held >= 0, near[np.maximum(held, 0)], -1)

    def chains(self, start: FloatArray, end: FloatArray) -> list[list[int]]:
        """Per query: the ops holding its covering op (:meth:`covering`), outermost first,
        ending at it (indices into the thread's ops; empty: none). The ops holding a covering
        op hold the stretch's middle, so only those around the middles are walked, once, in
        start order (each op's parent: the last open op that holds it)."""
        if not len(start):
            return []
        held = self.covering(start, end)
        points = np.sort((start + end) / 2)
        first = np.minimum(np.searchsorted(points, self.op_ts, side="left"), len(points) - 1)
        near = np.flatnonzero((self.op_ts <= points[first]) & (points[first] <= self.op_end))
        near = near[np.lexsort((-self.op_end[near], self.op_ts[near]))]
        ends = self.op_end.tolist()
        parent: dict[int, int] = {}
        open_: list[int] = []
        for k in near.tolist():
            while open_ and ends[open_[-1]] < ends[k]:  # (closed before k ends: not its parent)
                open_.pop()
            parent[k] = open_[-1] if open_ else -1
            open_.append(k)
        out = []
        for k in held.tolist():
            chain = []
            while k >= 0:
                chain.append(k)
                k = parent.get(k, -1)
            out.append(chain[::-1])
        return out


_OTHER = PRIORITY.index(Activity.OTHER)


@dataclass(frozen=True, slots=True)
class HostCalls:
    """A rank's CPU threads (:class:`Thread` by thread id) and its names."""

    threads: dict[int, Thread]
    names: Names

    @staticmethod
    def of(rows: pd.DataFrame, launched: Launches, names: Names | None = None) -> HostCalls:
        """The threads that launched GPU work of one rank's ``rows`` (ProfilerStep ranges
        left out: a step is not something a thread does)."""
        names = Names.of(rows["name"]) if names is None else names
        threads = np.unique(launched.tid[launched.tid >= 0])
        on_cpu = ~rows["on_gpu"].to_numpy()
        tid = rows["tid"].to_numpy()
        code = names.codes
        keep = np.flatnonzero(on_cpu & np.isin(tid, threads) & ~names.step[code])
        kinds, waits = names.activities(code[keep]), names.stream_wait[code[keep]]
        ts, end = rows["ts_us"].to_numpy()[keep], rows["end_us"].to_numpy()[keep]
        launch = launched.source[keep]  # the calls that launched GPU work
        named = (kinds >= 0) & (kinds != _OTHER)  # (most ops are OTHER: not unioned)
        out: dict[int, Thread] = {}
        kept_tid = tid[keep]
        for t in threads.tolist():
            mine = kept_tid == t
            if not mine.any():
                continue
            sets = tuple(
                union(ts[mine & (kinds == k)], end[mine & (kinds == k)]) if k != _OTHER else None
                for k in range(len(PRIORITY))
            )
            out[int(t)] = Thread(
                by_activity=tuple(x if x is not None else Intervals.empty() for x in sets),
                named=union(ts[mine & named], end[mine & named]),
                op_ts=ts[mine],
                op_end=end[mine],
                op_code=code[keep][mine],
                stream_waits=np.sort(ts[mine & waits]),
                launch_calls=np.sort(ts[mine & launch]),
            )
        return HostCalls(out, names)

    def doing(
        self, tid: IntArray, start: FloatArray, end: FloatArray, ops: bool = True
    ) -> tuple[IntArray, np.ndarray, BoolArray, BoolArray]:
        """Per query ``[start, end)`` on thread ``tid``: the activity that covers most of it
        (index into PRIORITY; ties: the earlier one), OTHER's share being what no named
        activity covers (other CPU work, or no recorded op: Python between ops); the
        innermost op covering most of it (:meth:`Thread.covering`; its name's code,
        ``self.names``; -1: none); whether a sync, and a collective, was in progress at
        ``start`` (the moment the GPU ran out of work). ``ops``: look the covering ops up
        (else -1)."""
        n = len(tid)
        top = np.full(n, _OTHER, dtype=np.int64)
        op = np.full(n, -1, dtype=np.int64)
        sync_at = np.zeros(n, dtype=bool)
        peer_at = np.zeros(n, dtype=bool)
        for t, thread in self.threads.items():
            q = np.flatnonzero(tid == t)
            if not len(q):
                continue
            s, e = start[q], np.maximum(end[q], start[q])
            shares = np.stack([covered(x, s, e) for x in thread.by_activity])
            shares[_OTHER] = (e - s) - covered(thread.named, s, e)
            best = np.argmax(shares, axis=0)  # (the first of equal shares: the priority)
            top[q] = np.where(shares.max(axis=0) > 0, best, _OTHER)
            if ops:
                held = thread.covering(s, e)
                op[q[held >= 0]] = thread.op_code[held[held >= 0]]
            sync_at[q] = _holds(thread.by_activity[PRIORITY.index(Activity.SYNC)], s)
            peer_at[q] = _holds(thread.by_activity[PRIORITY.index(Activity.COLLECTIVE)], s)
        return top, op, sync_at, peer_at

    def chains(self, tid: IntArray, start: FloatArray, end: FloatArray) -> np.ndarray:
        """Per query ``[start, end)`` on thread ``tid``: the CPU ranges holding the innermost
        one covering most of it (:meth:`Thread.chains`), outermost first, joined by ``" > "``
        as syncs.py's ``cpu_ops`` (ProfilerStep ranges are not a thread's: left out); None:
        no range covers most of it."""
        out = np.full(len(tid), None, dtype=object)
        for t, thread in self.threads.items():
            q = np.flatnonzero(tid == t)
            if not len(q):
                continue
            s, e = start[q], np.maximum(end[q], start[q])
            for i, chain in zip(q.tolist(), thread.chains(s, e), strict=True):
                if chain:
                    out[i] = " > ".join(str(n) for n in self.names.names[thread.op_code[chain]])
        return out

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


@dataclass(frozen=True, slots=True)
class RankHost:
    """What one rank's host did for its GPU: each row's launch and the launching threads'
    calls (built once per rank, read by waiting/idle.py, waiting/host_path.py and
    waiting/comm_causes.py)."""

    launched: Launches
    calls: HostCalls

    @staticmethod
    def of(rows: pd.DataFrame) -> RankHost:
        launched = launches(rows)
        return RankHost(launched, HostCalls.of(rows, launched))


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
