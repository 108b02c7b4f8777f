"""Every blocking host call of one rank, with its CPU op chain and the time it held the GPU.

A call blocks the launching thread until the GPU has caught up:

* ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, ``cudaEventSynchronize`` (and hip*);
* a synchronous ``cudaMemcpy``;
* ``cudaMemcpyAsync`` whose copy (its GPU row, by correlation id) names pageable memory
  (``Memcpy HtoD (Pageable -> Device)``): a pageable copy is staged by the host;

and its ``kind`` says what made it: ``item`` where ``aten::_local_scalar_dense`` /
``aten::item`` (``.item()``) is around it, ``tolist``, ``nonzero`` (``nonzero``,
``masked_select``, ``unique``: a shape the host must read), else the call's own kind (``stream
sync``, ``synchronous copy``, ``pageable copy``). A call found inside another is dropped: the
innermost one blocked.

Per call (:data:`SYNC_COLUMNS`): its step, thread, name and ``kind``; ``start_us``,
``dur_us`` (the blocked time); ``cpu_ops``, the CPU ops around it on its thread, outermost
first (``" > "`` between them); ``gpu_op``, the copy it waited for; ``stalled_us``, what the sync cost the GPU: the blocked time in which the GPU did
not compute or copy and the host ran no collective of its own (a GPU collective waiting for
a late peer meanwhile counts: the sync turned that wait into a drained queue), and the idle
after it until the next GPU op that the host path (waiting/host_path.py) gives to the sync (the
queue is empty when a sync returns);
``comm_in_flight_us``, how much of that window a collective was running on the GPU (a peer
late: the sync turned its wait into a drained queue), with the collective's ``group, seq``.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from overlapscope.analysis.intervals import (
    Intervals,
    clip,
    complement,
    covered,
    subtract,
    union,
    union_of,
)
from overlapscope.analysis.segments import column_in
from overlapscope.analysis.timeline.partition import LaneSets
from overlapscope.phases import Lane

SYNC_COLUMNS = [
    *("rank", "step", "tid", "call", "kind", "start_us", "dur_us", "cpu_ops", "gpu_op"),
    *("stalled_us", "comm_in_flight_us", "group", "seq"),
]
# The blocking calls by kind, the runtime's first (tried in this order).
_KINDS = (
    ("stream sync", re.compile(r"^(cuda|hip)(Stream|Device|Event|Ctx|Thread)?Synchronize$")),
    ("synchronous copy", re.compile(r"^(cuda|hip)Memcpy(2D|3D)?(ToSymbol|FromSymbol)?$")),
)
# The torch ops that make a runtime call block, by kind (the innermost in the chain wins).
_OPS = (
    ("item", re.compile(r"^aten::(_local_scalar_dense|item)$")),
    ("tolist", re.compile(r"^aten::tolist$")),
    ("nonzero", re.compile(r"^aten::(nonzero|nonzero_static|masked_select|unique\w*)$")),
    ("synchronous copy", re.compile(r"^aten::(copy_|_to_copy|to)$")),
)
_COPIES = ("synchronous copy", "pageable copy")
_ASYNC_COPY = re.compile(r"^(cuda|hip)MemcpyAsync$")
_NOT_CHAIN = re.compile(r"^(ProfilerStep#|cuda|hip)")


def _kind_of(names: np.ndarray) -> np.ndarray:
    out = np.full(len(names), None, dtype=object)
    for kind, pattern in _KINDS:
        hit = np.array(
            [out[i] is None and bool(pattern.match(n)) for i, n in enumerate(names)], dtype=bool
        )
        out[hit] = kind
    return out


def _candidates(rows: pd.DataFrame) -> pd.DataFrame:
    """The CPU rows that block, with their kind and the copy they waited for."""
    cpu = rows[~rows["on_gpu"].to_numpy()]
    names = cpu["name"].astype(str).to_numpy()
    kind = _kind_of(names)
    gpu = rows[rows["on_gpu"].to_numpy() & (rows["correlation"].to_numpy() >= 0)]
    copy_of = dict(zip(gpu["correlation"].tolist(), gpu["name"].astype(str).tolist(), strict=True))
    corr = cpu["correlation"].to_numpy()
    copies = np.array([copy_of.get(int(c)) for c in corr], dtype=object)
    pageable = np.array(
        [
            bool(_ASYNC_COPY.match(n)) and "Pageable" in str(g)
            for n, g in zip(names, copies, strict=True)
        ],
        dtype=bool,
    )
    kind[pageable] = "pageable copy"
    keep = kind != None  # noqa: E711 (elementwise)
    out = cpu[keep][["step", "tid", "ts_us", "end_us", "dur_us"]].copy()
    out["call"], out["kind"] = names[keep], kind[keep]
    out["gpu_op"] = np.where(np.isin(kind[keep], _COPIES), copies[keep], None)
    return out


def _innermost(found: pd.DataFrame) -> pd.DataFrame:
    """Drop a call that holds another one on its thread (``.item()`` around its runtime call:
    the runtime call is the one that blocked)."""
    drop = np.zeros(len(found), dtype=bool)
    for _, at in found.groupby("tid").indices.items():
        ts, end = found["ts_us"].to_numpy()[at], found["end_us"].to_numpy()[at]
        for i, row in enumerate(at):
            inside = (ts >= ts[i]) & (end <= end[i])
            inside[i] = False
            drop[row] = bool(inside.any())
    return found[~drop]


def _chains(rows: pd.DataFrame, found: pd.DataFrame) -> tuple[list[str], list[float]]:
    """Per call: the CPU ops of its thread around it, outermost first; and the start of the
    innermost of them (NaN: none)."""
    cpu = rows[~rows["on_gpu"].to_numpy()]
    out, inner = [], []
    for tid, ts, end in found[["tid", "ts_us", "end_us"]].itertuples(index=False):
        on = cpu[(cpu["tid"].to_numpy() == tid)]
        around = on[(on["ts_us"].to_numpy() <= ts) & (on["end_us"].to_numpy() >= end)]
        around = around.sort_values(["ts_us", "end_us"], ascending=[True, False])
        keep = [not _NOT_CHAIN.match(n) for n in around["name"].astype(str)]
        around = around[keep]
        out.append(" > ".join(around["name"].astype(str)))
        inner.append(float(around["ts_us"].iloc[-1]) if len(around) else float("nan"))
    return out, inner


def _kinds(found: pd.DataFrame, chains: list[str], inner: list[float]) -> list[str]:
    """Each call's kind (:func:`_kind`); a wait in the same op as a pageable copy is the
    copy's (the runtime stages a pageable copy, then waits for it)."""
    kinds = [_kind(k, c) for k, c in zip(found["kind"].tolist(), chains, strict=True)]
    tids = found["tid"].tolist()
    pageable = {(t, o) for t, o, k in zip(tids, inner, kinds, strict=True) if k == "pageable copy"}
    return [
        "pageable copy" if (t, o) in pageable and k == "synchronous copy" else k
        for t, o, k in zip(tids, inner, kinds, strict=True)
    ]


def _stalled(
    ts: np.ndarray, end: np.ndarray, hi: np.ndarray, busy: Intervals, after: Intervals
) -> np.ndarray:
    """Per call, in start order: the time of its blocked span ``[ts, end)`` outside ``busy``
    (work the other figures name), and of the idle after it up to the next GPU op ``[end,
    hi)`` what the host path calls the sync's (``after``: host_path's stretches of cause
    ``sync``; where the thread went on to other named work, that work's); less what an
    earlier call counted."""
    out = np.zeros(len(ts))
    seen = union([], [])
    for i in np.argsort(ts, kind="stable").tolist():
        free = subtract(clip(complement(busy, ts[i], end[i]), ts[i], end[i]), seen)
        idle = subtract(clip(after, end[i], hi[i]), seen) if hi[i] > end[i] else union([], [])
        out[i] = float(np.sum(free.ends - free.starts) + np.sum(idle.ends - idle.starts))
        seen = union_of(seen, free, idle)
    return out


def _kind(kind: str, chain: str) -> str:
    """The kind of the torch op around the call that made it block (a copy's own wait is
    the copy's; a pageable copy made by ``.item()`` is the ``.item()``'s), else the call's
    own."""
    for op in reversed(chain.split(" > ")):
        for name, pattern in _OPS:
            if pattern.match(op) and not (kind == "pageable copy" and name == "synchronous copy"):
                return name
    return kind


def _after(rows: pd.DataFrame, end: np.ndarray) -> np.ndarray:
    """Per call's return: the start of the first GPU op that starts after it (the return
    where none does). The queue is empty when a sync returns: until then the GPU waits for
    whatever the host does next."""
    on_gpu = rows["on_gpu"].to_numpy()
    starts = np.sort(rows["ts_us"].to_numpy()[on_gpu])
    if not len(starts):
        return end.copy()
    pick = np.minimum(np.searchsorted(starts, end, side="left"), len(starts) - 1)
    return np.where(starts[pick] >= end, starts[pick], end)


def rank_syncs(
    rows: pd.DataFrame, rank: int, sets: LaneSets, steps: pd.DataFrame, host_gaps: pd.DataFrame
) -> pd.DataFrame:
    """Every blocking call of one rank's counted ``rows`` (SYNC_COLUMNS). What a call cost
    the GPU is counted from its step's first GPU op on (``steps``: the steps table): before
    it, the GPU may still run work of an earlier step the profile left out, and that time
    is the step boundary's."""
    found = _innermost(_candidates(rows))
    if found.empty:
        return pd.DataFrame(columns=SYNC_COLUMNS)
    ts, end = found["ts_us"].to_numpy(), found["end_us"].to_numpy()
    window_end = _after(rows, end)
    mine = host_gaps[host_gaps["cause"] == "sync"] if "cause" in host_gaps else host_gaps.iloc[:0]
    after = union(mine["start_us"].to_numpy(), mine["end_us"].to_numpy())
    first = dict(zip(steps["step"].tolist(), steps["start_us"].tolist(), strict=True))
    begin = np.array([first.get(int(s), -np.inf) for s in found["step"]], dtype=float)
    counted_from = np.maximum(ts, begin)
    # Busy: compute, copies, the limiter, and communication or waits run by the host (a host
    # collective is the communication's). A GPU collective in flight during the sync is
    # not: its wait for a late peer became the sync's drained queue (named beside).
    on_host = ~rows["on_gpu"].to_numpy() & column_in(
        rows["lane"], [Lane.COMM.value, Lane.WAIT.value]
    )
    host_comm = union(rows["ts_us"].to_numpy()[on_host], rows["end_us"].to_numpy()[on_host])
    busy = union_of(sets.compute, sets.memory, sets.limiter, host_comm)
    stalled = _stalled(
        counted_from, np.maximum(end, counted_from), np.maximum(window_end, begin), busy, after
    )
    chains, inner = _chains(rows, found)
    kinds = _kinds(found, chains, inner)
    comm = rows[(rows["lane"] == Lane.COMM.value).to_numpy() & rows["on_gpu"].to_numpy()]
    in_flight = covered(union(comm["ts_us"], comm["end_us"]), ts, window_end)
    group, seq = _overlapping(comm, ts, window_end)
    return pd.DataFrame(
        {
            "rank": np.int32(rank),
            "step": found["step"].to_numpy(),
            "tid": found["tid"].to_numpy(),
            "call": found["call"].to_numpy(),
            "kind": kinds,
            "start_us": ts,
            "dur_us": found["dur_us"].to_numpy(),
            "cpu_ops": chains,
            "gpu_op": found["gpu_op"].to_numpy(),
            "stalled_us": np.maximum(stalled, 0.0),
            "comm_in_flight_us": in_flight,
            "group": group,
            "seq": seq,
        }
    )[SYNC_COLUMNS]


def _overlapping(comm: pd.DataFrame, ts: np.ndarray, end: np.ndarray) -> tuple[list, list]:
    """Per window: the group and seq of the collective that overlaps it most (None, -1)."""
    groups: list[object] = []
    seqs: list[int] = []
    cs, ce = comm["ts_us"].to_numpy(), comm["end_us"].to_numpy()
    for a, b in zip(ts.tolist(), end.tolist(), strict=True):
        over = np.minimum(ce, b) - np.maximum(cs, a)
        best = int(np.argmax(over)) if len(over) else -1
        hit = best >= 0 and over[best] > 0
        groups.append(comm["group"].iloc[best] if hit else None)
        seqs.append(int(comm["seq"].iloc[best]) if hit else -1)
    return groups, seqs
