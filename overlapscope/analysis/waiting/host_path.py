"""The critical path through the host: where the path meets a GPU waiting for its host, it
continues on the CPU thread that launched the next work.

The critical path (critical_path.py) cuts each rank's step into compute, exposed
communication, waits and ``idle``; its idle links said where nothing was traced, not why.
Each stretch of a rank with no compute, communication or wait ends when the next such op
starts; the op's launch tells whether the host held it back (idle.py's rules)::

    GPU   [gemm]                      [all-gather]        path: ... compute, host, comm
    CPU      ...Optimizer.step....launch^

An idle link is a ``host`` link when most of it lies in such a stretch the host caused
(``host_bound``, ``sync``, ``peer``: the thread was blocked in a CPU collective): it names
the op whose launch came late (``late_op``), the thread (``host_tid``), what it was doing
(``host_activity``: data loading, optimizer, Python hooks, a sync ...), the innermost CPU
range covering most of the stretch (``host_op``) and the ranges holding it, outermost first,
ending at it (``host_chain``, ``" > "`` between them, as host/syncs.py's ``cpu_ops``). The links
keep their times, so they still add up to the step, and the 10% what-if of a host link is
replayed like any other link (a 10% faster host launches that much sooner).

Per rank (:func:`rank_host_gaps`, from the rank's own rows; the ``--dask`` reduce task
makes it), then across ranks (:func:`through_host`, on the path).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from overlapscope.analysis.critical_path.path import CriticalPath
from overlapscope.analysis.host.calls import PRIORITY, RankHost
from overlapscope.analysis.intervals import Intervals, complement, union_of
from overlapscope.analysis.segments import column_in
from overlapscope.analysis.timeline.partition import LaneSets
from overlapscope.analysis.waiting.idle import CAUSES, HOST_CAUSES, classify, empty_table, frame
from overlapscope.phases import Lane

HOST_GAP_COLUMNS = [
    *("rank", "start_us", "end_us", "cause", "late_op", "launch_us"),
    *("host_tid", "host_activity", "host_op", "host_chain"),
]
# What the links table gains, and the steps table (time on host links, out of idle_us).
LINK_EXTRA = ["cause", "late_op", "host_tid", "host_activity", "host_op"]


def rank_host_gaps(rows: pd.DataFrame, rank: int, sets: LaneSets, host: RankHost) -> pd.DataFrame:
    """The stretches of one rank's counted rows with no compute, communication or wait
    (what the path calls idle) that its host caused, each with the cause of its end
    (HOST_GAP_COLUMNS)."""
    busy = union_of(sets.compute, sets.comm, sets.wait, sets.limiter)
    path_lanes = [Lane.COMPUTE.value, Lane.COMM.value, Lane.WAIT.value]
    work = np.flatnonzero(column_in(rows["lane"], path_lanes))
    steps = np.flatnonzero(column_in(rows["lane"], [Lane.STEP.value]))
    if not len(busy) or not len(work):
        return empty_host_gaps()
    ts = rows["ts_us"].to_numpy()
    lo = float(min(ts[steps].min(initial=np.inf), busy.starts[0]))
    free = complement(busy, lo, float(busy.ends[-1]))
    launch_at, launch_tid = host.launched.at, host.launched.tid
    order = work[np.lexsort((np.nan_to_num(launch_at[work], nan=np.inf), ts[work]))]
    ender = order[np.minimum(np.searchsorted(ts[order], free.ends), len(order) - 1)]
    lt, tid = launch_at[ender], launch_tid[ender]
    cause, activity, op = classify(free.starts, lt, tid, host.calls, free.ends)
    names = np.asarray([a.value for a in PRIORITY] + [None], dtype=object)
    # only the stretches the host caused: an idle link in no such stretch stays idle (most
    # stretches are launch latency; kept, they made the table as large as the trace)
    mine = np.isin(cause, [CAUSES.index(c) for c in HOST_CAUSES])
    free = Intervals(free.starts[mine], free.ends[mine])
    cause, activity, op, ender = cause[mine], activity[mine], op[mine], ender[mine]
    lt, tid = lt[mine], tid[mine]
    chain = host.calls.chains(tid, free.starts, np.minimum(lt, free.ends))
    return frame(
        {
            "rank": np.full(len(free), rank, dtype=np.int64),
            "start_us": free.starts,
            "end_us": free.ends,
            "cause": np.asarray(CAUSES, dtype=object)[cause],
            "late_op": np.asarray(host.calls.names.at(ender), dtype=object),
            "launch_us": lt,
            "host_tid": np.where(activity >= 0, tid, -1).astype(np.int64),
            "host_activity": names[activity],
            "host_op": np.asarray(host.calls.names.names, dtype=object)[op],
            "host_chain": chain,
        }
    )


def empty_host_gaps() -> pd.DataFrame:
    texts = ("cause", "late_op", "host_activity", "host_op", "host_chain")
    return empty_table(HOST_GAP_COLUMNS, ("rank", "host_tid"), texts)


def _largest_overlap(links: pd.DataFrame, host: pd.DataFrame) -> np.ndarray:
    """Per idle link, the position in ``host`` of the stretch of its rank that overlaps it
    most (-1: none), and that overlap."""
    best = np.full(len(links), -1, dtype=np.int64)
    most = np.zeros(len(links))
    idle = np.flatnonzero(links["kind"].to_numpy() == "idle")
    for r in np.unique(links["rank"].to_numpy()[idle]).tolist():
        mine = idle[links["rank"].to_numpy()[idle] == r]
        at = np.flatnonzero(host["rank"].to_numpy() == r)
        if not len(at):
            continue
        s, e = host["start_us"].to_numpy()[at], host["end_us"].to_numpy()[at]
        a, b = links["start_us"].to_numpy()[mine], links["end_us"].to_numpy()[mine]
        first = np.searchsorted(e, a, side="right")
        last = np.searchsorted(s, b, side="left")
        for i, (j0, j1) in enumerate(zip(first.tolist(), last.tolist(), strict=True)):
            if j1 <= j0:
                continue
            over = np.minimum(e[j0:j1], b[i]) - np.maximum(s[j0:j1], a[i])
            k = int(np.argmax(over))
            best[mine[i]], most[mine[i]] = at[j0 + k], float(over[k])
    return np.stack([best, most])


def through_host(
    links: pd.DataFrame, steps: pd.DataFrame, host: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The path's ``links`` and ``steps`` with their host links: an idle link most of which
    lies in a stretch its host caused becomes ``kind`` host, with that stretch's cause, late
    op, thread, activity and op (LINK_EXTRA; the other links: None); ``steps`` gain
    ``host_us``, taken from ``idle_us``."""
    found = _largest_overlap(links, host)
    at, over = found[0].astype(np.int64), found[1]
    dur = links["dur_us"].to_numpy(dtype=np.float64)
    known = at >= 0
    cause = np.full(len(links), None, dtype=object)
    cause[known] = host["cause"].to_numpy()[at[known]]
    is_host = known & np.isin(cause, HOST_CAUSES) & (2.0 * over > dur)
    out = links.copy()
    out["kind"] = np.where(is_host, "host", out["kind"].to_numpy(dtype=object))
    out["cause"] = np.where(is_host, cause, np.full(len(links), None, dtype=object))
    for c in ("late_op", "host_tid", "host_activity", "host_op"):
        values = np.full(len(links), None, dtype=object)
        values[is_host] = host[c].to_numpy(dtype=object)[at[is_host]]
        out[c] = values
    per_step = pd.Series(np.where(is_host, dur, 0.0)).groupby(links["step"].to_numpy()).sum()
    host_us = per_step.reindex(steps["step"].to_numpy()).fillna(0.0).to_numpy()
    new_steps = steps.assign(idle_us=steps["idle_us"].to_numpy() - host_us, host_us=host_us)
    return out, new_steps


def with_host(path: CriticalPath, host: pd.DataFrame) -> CriticalPath:
    """The critical path with its host links (:func:`through_host`); ``host``: every rank's
    :func:`rank_host_gaps`."""
    return CriticalPath(*through_host(path.links, path.steps, host))
