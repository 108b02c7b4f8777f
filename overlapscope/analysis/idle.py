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

import numpy as np
import pandas as pd

from overlapscope.analysis.fields import PER_STEP, TOTAL
from overlapscope.analysis.host import PRIORITY, Activity, HostCalls, launches
from overlapscope.analysis.intervals import Intervals, gaps, union_of
from overlapscope.analysis.partition import LaneSets
from overlapscope.analysis.segments import column_in
from overlapscope.arrays import FloatArray, IntArray
from overlapscope.trace.schema import EventLane

CAUSES = ("host_bound", "sync", "peer", "cross_stream", "other")
CAUSE_COLUMNS = tuple(f"idle_{c}_us" for c in CAUSES)
# HTA's threshold under which a queued op's gap is launch latency ("kernel wait"), µs.
KERNEL_WAIT_US = 30.0
GAP_COLUMNS = [
    *("rank", "step", "start_us", "end_us", "dur_us", "cause", "next_op", "next_stream"),
    *("launch_us", "host_tid", "host_activity", "host_op"),
]
STREAM_COLUMNS = [
    *("rank", "stream", "num_gaps", "idle_total_us"),
    *(f"{c}_total_us" for c in CAUSES),
    *("hta_host_wait_total_us", "hta_kernel_wait_total_us", "hta_other_total_us"),
]
_HOST, _SYNC, _PEER, _CROSS, _OTHER = range(len(CAUSES))


def _gpu_ops(rows: pd.DataFrame, markers: bool = True) -> IntArray:
    """Positions of the rank's GPU activity, by start (``markers``: with the sync markers,
    which HTA's per-stream breakdown leaves out with its kernel categories)."""
    ops = rows["on_gpu"].to_numpy()
    if not markers:
        ops = ops & ~column_in(rows["lane"], [EventLane.OTHER.value])
    at = np.flatnonzero(ops)
    return at[np.argsort(rows["ts_us"].to_numpy()[at], kind="stable")]


def classify(
    g0: FloatArray, launch_us: FloatArray, tid: IntArray, calls: HostCalls, g1: FloatArray
) -> tuple[IntArray, IntArray, np.ndarray]:
    """Per gap ``[g0, g1)`` ended by an op launched at ``launch_us`` from thread ``tid``:
    its cause (index into CAUSES), and for gaps the host caused, the launching thread's main
    activity (index into host.PRIORITY; -1 otherwise) and innermost op meanwhile."""
    late = launch_us > g0  # (NaN: not late, the launch is unknown)
    cause = np.full(len(g0), _OTHER, dtype=np.int64)
    activity = np.full(len(g0), -1, dtype=np.int64)
    op = np.full(len(g0), None, dtype=object)
    if late.any():
        q = np.flatnonzero(late)
        host_end = np.minimum(launch_us[q], g1[q])
        top, named, sync_at, peer_at = calls.doing(tid[q], g0[q], host_end)
        is_sync = sync_at | (top == PRIORITY.index(Activity.SYNC))
        is_peer = ~is_sync & (peer_at | (top == PRIORITY.index(Activity.COLLECTIVE)))
        cause[q] = np.where(is_sync, _SYNC, np.where(is_peer, _PEER, _HOST))
        activity[q], op[q] = top, named
    queued = ~late & np.isfinite(launch_us)
    if queued.any():
        q = np.flatnonzero(queued)
        cause[q[calls.waited_on_stream(tid[q], launch_us[q])]] = _CROSS
    return cause, activity, op


def rank_gaps(rows: pd.DataFrame, rank: int, windows: pd.DataFrame, sets: LaneSets) -> pd.DataFrame:
    """The idle gaps of one GPU rank's steps (``windows``: its steps table rows; ``rows``:
    its counted rows; ``sets``: their lane sets), one row each (GAP_COLUMNS)."""
    busy = union_of(sets.compute, sets.comm, sets.memory, sets.other)
    parts = [
        (int(s), gaps(busy, float(lo), float(hi)))
        for s, lo, hi in zip(windows["step"], windows["start_us"], windows["end_us"], strict=True)
    ]
    none = [(0, Intervals.empty())]
    step = np.concatenate([np.full(len(g), s, dtype=np.int64) for s, g in parts or none])
    g0 = np.concatenate([g.starts for _, g in parts or none])
    g1 = np.concatenate([g.ends for _, g in parts or none])
    ops = _gpu_ops(rows)
    ts = rows["ts_us"].to_numpy()
    launch_at, launch_tid = launches(rows)
    # the op that ends each gap: the first to start at its end (the earliest launched)
    order = ops[np.lexsort((np.nan_to_num(launch_at[ops], nan=np.inf), ts[ops]))]
    at = np.minimum(np.searchsorted(ts[order], g1, side="left"), max(len(order) - 1, 0))
    ender = order[at] if len(order) else np.zeros(0, dtype=np.int64)
    lt, tid = launch_at[ender], launch_tid[ender]
    calls = HostCalls.of(rows, np.unique(tid[tid >= 0]))
    cause, activity, op = classify(g0, lt, tid, calls, g1)
    names = np.asarray([a.value for a in PRIORITY] + [None], dtype=object)
    return pd.DataFrame(
        {
            "rank": np.full(len(g0), rank, dtype=np.int64),
            "step": step,
            "start_us": g0,
            "end_us": g1,
            "dur_us": g1 - g0,
            "cause": np.asarray(CAUSES, dtype=object)[cause],
            "next_op": rows["name"].to_numpy()[ender].astype(object),
            "next_stream": rows["stream"].to_numpy()[ender].astype(np.int64),
            "launch_us": lt,
            "host_tid": np.where(activity >= 0, tid, -1).astype(np.int64),
            "host_activity": names[activity],
            "host_op": op,
        },
        columns=GAP_COLUMNS,
    )


def empty_gaps() -> pd.DataFrame:
    return pd.DataFrame({c: [] for c in GAP_COLUMNS}).astype(
        {"rank": np.int64, "step": np.int64, "next_stream": np.int64, "host_tid": np.int64}
    )


def empty_streams() -> pd.DataFrame:
    return pd.DataFrame({c: [] for c in STREAM_COLUMNS}).astype(
        {"rank": np.int64, "stream": np.int64, "num_gaps": np.int64}
    )


def idle_by_cause(
    steps: pd.DataFrame, gap_table: pd.DataFrame, gpu_ranks: list[int]
) -> pd.DataFrame:
    """The steps table with each step's idle split by cause (CAUSE_COLUMNS, adding up to
    its ``idle_us``); ranks not in ``gpu_ranks`` (CPU-only) have all of it as ``other``."""
    out = steps.copy()
    for c in CAUSE_COLUMNS:
        out[c] = 0.0
    if len(gap_table):
        sums = gap_table.pivot_table(
            index=["rank", "step"], columns="cause", values="dur_us", aggfunc="sum"
        )
        key = pd.MultiIndex.from_arrays([out["rank"].to_numpy(), out["step"].to_numpy()])
        for cause, column in zip(CAUSES, CAUSE_COLUMNS, strict=True):
            if cause in sums.columns:
                found = sums[cause].reindex(key).to_numpy()
                out[column] = np.nan_to_num(found, nan=0.0)
    gpu = out["rank"].isin(gpu_ranks).to_numpy()
    # what rounding leaves between the gaps' sum and the partition's idle goes to "other",
    # so the causes add up to idle_us exactly; a CPU rank's idle is all "other"
    named = out[list(CAUSE_COLUMNS[:-1])].sum(axis=1).to_numpy()
    out["idle_other_us"] = np.where(gpu, out["idle_us"].to_numpy() - named, out["idle_us"])
    for c in CAUSE_COLUMNS[:-1]:
        out[c] = np.where(gpu, out[c].to_numpy(), 0.0)
    return out


def stream_idle(rows: pd.DataFrame, rank: int) -> pd.DataFrame:
    """Per stream of one GPU rank's counted rows: the gaps between consecutive ops, split by
    our causes and by HTA's categories (STREAM_COLUMNS)."""
    ops = _gpu_ops(rows, markers=False)
    stream = rows["stream"].to_numpy()[ops]
    ops = ops[np.argsort(stream, kind="stable")]  # by stream, then start
    stream = stream[np.argsort(stream, kind="stable")]
    ts, end = rows["ts_us"].to_numpy()[ops], rows["end_us"].to_numpy()[ops]
    launch_at, launch_tid = launches(rows)
    follows = np.flatnonzero(stream[1:] == stream[:-1]) + 1  # an op after another
    g0, g1 = end[follows - 1], ts[follows]
    lt, tid = launch_at[ops[follows]], launch_tid[ops[follows]]
    calls = HostCalls.of(rows, np.unique(tid[tid >= 0]))
    cause, _, _ = classify(g0, lt, tid, calls, np.maximum(g1, g0))
    gap = g1 - g0
    host_wait = lt > g0
    hta = np.where(host_wait, 0, np.where(gap < KERNEL_WAIT_US, 1, 2))
    records = []
    for s in np.unique(stream).tolist():
        mine = stream[follows] == s
        rec: dict[str, object] = {"rank": rank, "stream": int(s), "num_gaps": int(mine.sum())}
        rec["idle_total_us"] = float(gap[mine].sum())
        for k, c in enumerate(CAUSES):
            rec[f"{c}_total_us"] = float(gap[mine & (cause == k)].sum())
        for k, c in enumerate(("host_wait", "kernel_wait", "other")):
            rec[f"hta_{c}_total_us"] = float(gap[mine & (hta == k)].sum())
        records.append(rec)
    return pd.DataFrame.from_records(records, columns=STREAM_COLUMNS)


def gpu_op_counts(ev: pd.DataFrame, steps: pd.DataFrame) -> IntArray:
    """Per row of ``steps``: how many GPU ops (kernels, copies, sets) it launched."""
    gpu = ev["on_gpu"].to_numpy() & (ev["step"].to_numpy() >= 0)
    counts = (
        pd.Series(
            1,
            index=pd.MultiIndex.from_arrays(
                [ev["rank"].to_numpy()[gpu].astype(np.int64), ev["step"].to_numpy()[gpu]]
            ),
        )
        .groupby(level=[0, 1])
        .sum()
    )
    key = pd.MultiIndex.from_arrays(
        [steps["rank"].to_numpy().astype(np.int64), steps["step"].to_numpy()]
    )
    return counts.reindex(key).fillna(0).to_numpy(dtype=np.int64)


def join(parts: list[pd.DataFrame], empty: pd.DataFrame) -> pd.DataFrame:
    """The ranks' tables, one after the other; those without rows left out (``empty``
    when none has any)."""
    found = [p for p in parts if len(p)]
    if not found:
        return empty
    return found[0] if len(found) == 1 else pd.concat(found, ignore_index=True)


def rank_idle(ranks: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """The ranks table with each idle cause's total over the counted steps and mean per
    step (``idle_<cause>_total_us``, ``idle_<cause>_per_step_us``), from ``steps``
    (:func:`idle_by_cause`'s)."""
    sums = steps.groupby("rank")[list(CAUSE_COLUMNS)].sum()
    out = ranks.copy()
    n = out["num_steps"].to_numpy(dtype=np.float64)
    for c in CAUSE_COLUMNS:
        total = sums[c].reindex(out["rank"].to_numpy()).fillna(0.0).to_numpy()
        figure = c.removesuffix("_us")
        out[f"{figure}{TOTAL}"] = total
        out[f"{figure}{PER_STEP}"] = np.where(n > 0, total / np.maximum(n, 1.0), np.nan)
    return out
