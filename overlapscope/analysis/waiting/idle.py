"""Where the GPU waits: every GPU idle gap of a step traced to its cause.

A rank's idle time (the partition's ``idle``: nothing runs on the GPU) is a set of gaps. A
gap ends when the next GPU op starts; why it did not start sooner is told by its launch
(the CPU call with its correlation id) and by what the launching thread was doing::

    GPU      [kernel A]              [kernel B]
    CPU             ...launch B
                ^ A ends (g0)  ^ B launched (L)

* ``host_bound``: B was launched after the gap began (L > g0): the host did not keep the
  GPU fed (Python, many small ops, the framework's hooks);
* ``sync``: ... and the launching thread was blocked in a host sync when the GPU ran out of
  work, or a sync is most of what it did before launching (``cudaStreamSynchronize``,
  ``cudaDeviceSynchronize``, a synchronous copy, ``.item()``: host.Activity.SYNC);
* ``peer``: ... the thread was blocked in a collective waiting for its peers (a gloo op,
  a barrier: host.Activity.COLLECTIVE) instead;
* ``cross_stream``: B was queued before the gap (L <= g0) but its stream waited on another
  stream's event (``cudaStreamWaitEvent`` just before its launch);
* ``other``: B was queued and nothing made it wait: launch latency (HTA's "kernel wait"),
  or B's launch is not in the trace.

The causes of a step's gaps add up to its ``idle_us``. CPU-only ranks have no launches:
their idle is ``other``.

Per stream (:func:`stream_idle`), the same rules split the gaps between consecutive ops of
each stream, as HTA's ``get_idle_time_breakdown`` does, with HTA's categories beside ours
(``host_wait``: launched after the stream's previous op ended; ``kernel_wait``: under 30
µs; ``other``): a cross-check, not a partition (streams overlap, so they sum past the step).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from overlapscope.analysis.fields import PER_STEP, TOTAL
from overlapscope.analysis.host.calls import PRIORITY, Activity, HostCalls, RankHost
from overlapscope.analysis.intervals import free_within, union_of
from overlapscope.analysis.segments import column_in
from overlapscope.analysis.timeline.partition import LaneSets
from overlapscope.arrays import BoolArray, FloatArray, IntArray
from overlapscope.phases import Lane

CAUSES = ("host_bound", "sync", "peer", "cross_stream", "other")
CAUSE_COLUMNS = tuple(f"idle_{c}_us" for c in CAUSES)
# HTA's threshold under which a queued op's gap is launch latency ("kernel wait"), µs.
KERNEL_WAIT_US = 30.0
GAP_COLUMNS = [
    *("rank", "step", "start_us", "end_us", "dur_us", "cause", "next_op", "next_stream"),
    *("launch_us", "host_tid", "host_activity", "host_op"),
]
# What the launching thread was in while the GPU waited for it, per rank (a summary of the
# gaps the host caused, small whatever the trace: the findings and the dashboard read it).
HOST_OP_COLUMNS = [
    *("rank", "cause", "host_activity", "host_op", "num_gaps", "dur_total_us"),
]
HOST_CAUSES = ("host_bound", "sync", "peer")
STREAM_COLUMNS = [
    *("rank", "stream", "num_gaps", "idle_total_us"),
    *(f"{c}_total_us" for c in CAUSES),
    *("hta_host_wait_total_us", "hta_kernel_wait_total_us", "hta_other_total_us"),
]
_HOST, _SYNC, _PEER, _CROSS, _OTHER = range(len(CAUSES))


def objects(values: np.ndarray) -> pd.Series:
    """A column of names as Python objects: not converted into the string type pandas
    would infer (~1 ms per 1,000 rows, measured), None where missing."""
    return pd.Series(values, dtype=object, copy=False)


def frame(columns: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """A table of 1-D arrays of one length, each column as it is: no copy and no
    conversion (names stay Python objects, None where missing: pandas 3 would convert
    them into its string type). ~40 µs, against ~170 for ``pd.DataFrame`` with
    :func:`objects` columns, for the few small tables each rank makes."""
    arrays = [np.asarray(a) for a in columns.values()]
    n = len(arrays[0]) if arrays else 0
    make = getattr(pd.DataFrame, "_from_arrays", None)
    if make is None:  # (a pandas without it: the public, slower way)
        return pd.DataFrame(
            {
                c: objects(a) if a.dtype == object else a
                for c, a in zip(columns, arrays, strict=True)
            }
        )
    names = pd.Index(list(columns), dtype=object)  # (not an Arrow string index: ~0.2 ms)
    out: pd.DataFrame = make(arrays, columns=names, index=pd.RangeIndex(n), verify_integrity=False)
    return out


def _gpu_ops(rows: pd.DataFrame, markers: bool = True) -> IntArray:
    """Positions of the rank's GPU activity, by start (``markers``: with the sync markers,
    which HTA's per-stream breakdown leaves out with its kernel categories)."""
    ops = rows["on_gpu"].to_numpy()
    if not markers:
        ops = ops & ~column_in(rows["lane"], [Lane.OTHER.value])
    at = np.flatnonzero(ops)
    return at[np.argsort(rows["ts_us"].to_numpy()[at], kind="stable")]


def classify(
    g0: FloatArray,
    launch_us: FloatArray,
    tid: IntArray,
    calls: HostCalls,
    g1: FloatArray,
    ops: bool = True,
) -> tuple[IntArray, IntArray, np.ndarray]:
    """Per gap ``[g0, g1)`` ended by an op launched at ``launch_us`` from thread ``tid``:
    its cause (index into CAUSES), and for gaps the host caused, the launching thread's main
    activity (index into host.PRIORITY; -1 otherwise) and the innermost CPU range covering
    most of the host's stretch (its name's code in ``calls.names``; -1: none, or ``ops``
    False: not looked up)."""
    late = launch_us > g0  # (NaN: not late, the launch is unknown)
    cause = np.full(len(g0), _OTHER, dtype=np.int64)
    activity = np.full(len(g0), -1, dtype=np.int64)
    op = np.full(len(g0), -1, dtype=np.int64)
    if late.any():
        q = np.flatnonzero(late)
        host_end = np.minimum(launch_us[q], g1[q])
        top, named, sync_at, peer_at = calls.doing(tid[q], g0[q], host_end, ops)
        is_sync = sync_at | (top == PRIORITY.index(Activity.SYNC))
        is_peer = ~is_sync & (peer_at | (top == PRIORITY.index(Activity.COLLECTIVE)))
        cause[q] = np.where(is_sync, _SYNC, np.where(is_peer, _PEER, _HOST))
        activity[q], op[q] = top, named
    queued = ~late & np.isfinite(launch_us)
    if queued.any():
        q = np.flatnonzero(queued)
        cause[q[calls.waited_on_stream(tid[q], launch_us[q])]] = _CROSS
    return cause, activity, op


def rank_gaps(
    rows: pd.DataFrame,
    rank: int,
    windows: pd.DataFrame,
    sets: LaneSets,
    host: RankHost,
    table: bool = True,
) -> tuple[pd.DataFrame | None, FloatArray, pd.DataFrame]:
    """The idle gaps of one GPU rank's steps (``windows``: its steps table rows; ``rows``:
    its counted rows; ``sets``: their lane sets; ``host``: their launches and host calls),
    one row each (GAP_COLUMNS; ``table`` False: None); the time of each cause per
    window (cause x window); and their summary, :func:`host_ops`."""
    busy = union_of(sets.compute, sets.comm, sets.memory, sets.other)
    w_start, w_end = windows["start_us"].to_numpy(), windows["end_us"].to_numpy()
    window, g0, g1 = free_within(busy, w_start, w_end)  # (the partition's idle, per step)
    step = windows["step"].to_numpy(np.int64)[window]
    ops = _gpu_ops(rows)
    ts = rows["ts_us"].to_numpy()
    launch_at, launch_tid = host.launched.at, host.launched.tid
    # the op that ends each gap: the first to start at its end (the earliest launched)
    order = ops[np.lexsort((np.nan_to_num(launch_at[ops], nan=np.inf), ts[ops]))]
    at = np.minimum(np.searchsorted(ts[order], g1, side="left"), max(len(order) - 1, 0))
    ender = order[at] if len(order) else np.zeros(0, dtype=np.int64)
    lt, tid = launch_at[ender], launch_tid[ender]
    cause, activity, op = classify(g0, lt, tid, host.calls, g1)
    names = np.asarray([a.value for a in PRIORITY] + [None], dtype=object)
    sums = np.zeros((len(CAUSES), len(windows)))
    np.add.at(sums, (cause, window), g1 - g0)
    ops_table = host_ops(rank, (cause, activity, op), g1 - g0, host.calls.names.names)
    if not table:
        return None, sums, ops_table
    gap_table = frame(
        {
            "rank": np.full(len(g0), rank, dtype=np.int64),
            "step": step,
            "start_us": g0,
            "end_us": g1,
            "dur_us": g1 - g0,
            "cause": np.asarray(CAUSES, dtype=object)[cause],
            "next_op": np.asarray(host.calls.names.at(ender), dtype=object),
            "next_stream": rows["stream"].to_numpy()[ender].astype(np.int64),
            "launch_us": lt,
            "host_tid": np.where(activity >= 0, tid, -1).astype(np.int64),
            "host_activity": names[activity],
            "host_op": np.asarray(host.calls.names.names, dtype=object)[op],
        }
    )
    return gap_table, sums, ops_table


def empty_table(columns: list[str], ints: tuple[str, ...], texts: tuple[str, ...]) -> pd.DataFrame:
    """A table of ``columns`` without rows: ``ints`` int64, ``texts`` objects, the rest
    float64 (made once per shape: a CPU rank asks for several every time)."""
    return _empty_table(tuple(columns), ints, texts).copy(deep=False)


@functools.cache
def _empty_table(
    columns: tuple[str, ...], ints: tuple[str, ...], texts: tuple[str, ...]
) -> pd.DataFrame:
    def empty(c: str) -> np.ndarray:
        return np.zeros(0, dtype=np.int64 if c in ints else object if c in texts else np.float64)

    return frame({c: empty(c) for c in columns})


def empty_gaps() -> pd.DataFrame:
    texts = ("cause", "next_op", "host_activity", "host_op")
    return empty_table(GAP_COLUMNS, ("rank", "step", "next_stream", "host_tid"), texts)


def host_ops(
    rank: int, codes: tuple[IntArray, IntArray, IntArray], dur: FloatArray, op_names: np.ndarray
) -> pd.DataFrame:
    """The gaps the host caused (HOST_CAUSES) by cause, the thread's activity and its
    innermost op (``codes``: per gap, into CAUSES, host.PRIORITY and ``op_names``, -1:
    none): how many and how long (HOST_OP_COLUMNS), longest first."""
    cause, activity, op = codes
    mine = np.isin(cause, [CAUSES.index(c) for c in HOST_CAUSES])
    if not mine.any():
        return empty_host_ops()
    span_a, span_o = len(PRIORITY) + 1, len(op_names) + 1
    key = (cause[mine] * span_a + activity[mine] + 1) * span_o + op[mine] + 1
    keys, at = np.unique(key, return_inverse=True)
    total = np.bincount(at, weights=dur[mine], minlength=len(keys))
    order = np.argsort(-total, kind="stable")
    keys, total = keys[order], total[order]
    count = np.bincount(at, minlength=len(order))[order]
    activities = np.asarray([a.value for a in PRIORITY] + [None], dtype=object)
    named = np.append(op_names, "-").astype(object)  # (op -1: the last, "-")
    return frame(
        {
            "rank": np.full(len(keys), rank, dtype=np.int64),
            "cause": np.asarray(CAUSES, dtype=object)[keys // span_o // span_a],
            "host_activity": activities[keys // span_o % span_a - 1],
            "host_op": named[keys % span_o - 1],
            "num_gaps": count.astype(np.int64),
            "dur_total_us": total,
        }
    )


def empty_host_ops() -> pd.DataFrame:
    return empty_table(HOST_OP_COLUMNS, ("rank", "num_gaps"), ("cause", "host_activity", "host_op"))


def empty_streams() -> pd.DataFrame:
    return empty_table(STREAM_COLUMNS, ("rank", "stream", "num_gaps"), ())


def _positions(steps: pd.DataFrame, rank: IntArray, step: IntArray) -> IntArray:
    """Each (rank, step)'s row in ``steps`` (-1: none), by packed keys."""
    s_rank = steps["rank"].to_numpy(np.int64)
    s_step = steps["step"].to_numpy(np.int64) + 1  # (-1: a rank without steps)
    span = int(max(s_step.max(initial=0), (step + 1).max(initial=0))) + 1
    keys = s_rank * span + s_step
    order = np.argsort(keys, kind="stable")
    want = rank.astype(np.int64) * span + step + 1
    at = np.minimum(np.searchsorted(keys[order], want), max(len(keys) - 1, 0))
    found = (keys[order][at] == want) if len(keys) else np.zeros(len(want), dtype=bool)
    return np.where(found, order[at] if len(keys) else 0, -1)


def idle_by_cause(
    steps: pd.DataFrame, sums: FloatArray, gpu: BoolArray, num_gpu_ops: IntArray
) -> pd.DataFrame:
    """The steps table with each step's idle split by cause (CAUSE_COLUMNS, adding up to
    its ``idle_us``): ``sums``, the gaps' time per cause and step row (:func:`rank_gaps`);
    ``gpu``: the rows of GPU ranks (a CPU rank's idle is all ``other``); and
    ``num_gpu_ops`` (:func:`gpu_op_counts`)."""
    idle = steps["idle_us"].to_numpy(np.float64)
    named = np.where(gpu, sums[:-1], 0.0)
    # what rounding leaves between the gaps' sum and the partition's idle goes to "other",
    # so the causes add up to idle_us exactly
    other = np.where(gpu, idle - named.sum(axis=0), idle)
    columns: dict[str, np.ndarray] = dict(zip(CAUSE_COLUMNS, [*named, other], strict=True))
    columns["num_gpu_ops"] = num_gpu_ops
    given = {c: steps[c].to_numpy() for c in steps.columns}
    if not isinstance(steps.index, pd.RangeIndex) or any(
        a.dtype.kind not in "iuf" for a in given.values()
    ):
        return pd.concat([steps, pd.DataFrame(columns, index=steps.index)], axis=1)
    # (numbers only, as step_table makes them: one table of the arrays as they are)
    return frame({**given, **columns})


def stream_idle(rows: pd.DataFrame, rank: int, host: RankHost) -> pd.DataFrame:
    """Per stream of one GPU rank's counted rows: the gaps between consecutive ops, split by
    our causes and by HTA's categories (STREAM_COLUMNS)."""
    ops = _gpu_ops(rows, markers=False)
    stream = rows["stream"].to_numpy()[ops]
    ops = ops[np.argsort(stream, kind="stable")]  # by stream, then start
    stream = stream[np.argsort(stream, kind="stable")]
    ts, end = rows["ts_us"].to_numpy()[ops], rows["end_us"].to_numpy()[ops]
    launch_at, launch_tid = host.launched.at, host.launched.tid
    follows = np.flatnonzero(stream[1:] == stream[:-1]) + 1  # an op after another
    g0, g1 = end[follows - 1], ts[follows]
    lt, tid = launch_at[ops[follows]], launch_tid[ops[follows]]
    cause, _, _ = classify(g0, lt, tid, host.calls, np.maximum(g1, g0), ops=False)
    gap = g1 - g0
    hta = hta_category(gap, lt, g0)
    streams, index = np.unique(stream, return_inverse=True)
    n, at = len(streams), index.reshape(-1)[follows]
    columns: dict[str, np.ndarray] = {"rank": np.full(n, rank, dtype=np.int64), "stream": streams}
    columns["num_gaps"] = np.bincount(at, minlength=n).astype(np.int64)
    columns["idle_total_us"] = np.bincount(at, weights=gap, minlength=n)
    by_cause = np.bincount(at * len(CAUSES) + cause, weights=gap, minlength=n * len(CAUSES))
    for k, c in enumerate(CAUSES):
        columns[f"{c}_total_us"] = by_cause.reshape(n, len(CAUSES))[:, k]
    by_hta = np.bincount(at * 3 + hta, weights=gap, minlength=n * 3).reshape(n, 3)
    for k, c in enumerate(HTA_CATEGORIES):
        columns[f"hta_{c}_total_us"] = by_hta[:, k]
    return frame({c: columns[c] for c in STREAM_COLUMNS})


HTA_CATEGORIES = ("host_wait", "kernel_wait", "other")


def hta_category(gap: FloatArray, launch: FloatArray, before: FloatArray) -> IntArray:
    """HTA's category of each gap between a stream's consecutive ops (an index into
    HTA_CATEGORIES): host wait where the op was launched after the previous op ended
    (``before``), else kernel wait under KERNEL_WAIT_US, else other."""
    return np.where(launch > before, 0, np.where(gap < KERNEL_WAIT_US, 1, 2))


def hta_streams(rows: pd.DataFrame, launched_at: FloatArray, end: FloatArray) -> pd.DataFrame:
    """HTA's idle split per stream of one rank's rows as HTA 0.5.0 computes it, each op's
    end given (``end``, by row): per stream, ops by start, each gap the op's start minus the
    previous op's end (``stream, host_wait_us, kernel_wait_us, other_us``)."""
    ops = _gpu_ops(rows, markers=False)
    stream, ts = rows["stream"].to_numpy()[ops], rows["ts_us"].to_numpy()[ops]
    order = np.lexsort((ts, stream))
    ops, stream, ts = ops[order], stream[order], ts[order]
    follows = np.flatnonzero(stream[1:] == stream[:-1]) + 1
    before = end[ops[follows - 1]]
    gap = ts[follows] - before
    category = hta_category(gap, launched_at[ops[follows]], before)
    streams, index = np.unique(stream, return_inverse=True)
    n, at = len(streams), index.reshape(-1)[follows]
    split = np.bincount(at * 3 + category, weights=gap, minlength=n * 3).reshape(n, 3)
    columns = {f"{c}_us": split[:, k] for k, c in enumerate(HTA_CATEGORIES)}
    return pd.DataFrame({"stream": streams, **columns})


def gpu_op_counts(ev: pd.DataFrame, steps: pd.DataFrame) -> IntArray:
    """Per row of ``steps``: how many GPU ops (kernels, copies, sets) it launched."""
    gpu = ev["on_gpu"].to_numpy() & (ev["step"].to_numpy() >= 0)
    at = _positions(steps, ev["rank"].to_numpy()[gpu], ev["step"].to_numpy()[gpu])
    return np.bincount(at[at >= 0], minlength=len(steps)).astype(np.int64)


def join(parts: list[pd.DataFrame | None], empty: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """The ranks' tables, one after the other; those without rows left out (``empty()``
    when none has any)."""
    found = [p for p in parts if p is not None and len(p)]
    if not found:
        return empty()
    return found[0] if len(found) == 1 else pd.concat(found, ignore_index=True)


def rank_idle(ranks: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """The ranks table with each idle cause's total over the counted steps and mean per
    step (``idle_<cause>_total_us``, ``idle_<cause>_per_step_us``), from ``steps``
    (:func:`idle_by_cause`'s)."""
    at = np.searchsorted(ranks["rank"].to_numpy(), steps["rank"].to_numpy())
    at = np.minimum(at, max(len(ranks) - 1, 0))
    n = ranks["num_steps"].to_numpy(dtype=np.float64)
    columns: dict[str, np.ndarray] = {}
    for c in CAUSE_COLUMNS:
        total = np.bincount(at, weights=steps[c].to_numpy(), minlength=len(ranks))
        figure = c.removesuffix("_us")
        columns[f"{figure}{TOTAL}"] = total[: len(ranks)]
        columns[f"{figure}{PER_STEP}"] = np.where(
            n > 0, total[: len(ranks)] / np.maximum(n, 1.0), np.nan
        )
    return pd.concat([ranks, pd.DataFrame(columns, index=ranks.index)], axis=1)
