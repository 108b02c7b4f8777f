"""The dependency graph of one step across ranks, and its replay (longest path).

Nodes: per rank a source (the rank's step start) followed by its segments in time order
(:func:`overlapscope.analysis.segments.segment_groups`). A node starts when its predecessor on
the same rank ends; a *sync* node (the last exposed segment of a collective on a rank, which
ends when the collective ends) also waits for the arrival of every other rank at that
collective: the node of that rank that ends where its transfer starts. Weights are set so the
replay of the recorded weights gives back the recorded ends: a plain node weighs its duration,
a sync node ``end - max(start, latest arrival)`` (the transfer after the last rank arrived).
An arrival recorded after the collective's end (clock noise) is dropped.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.analysis.segments import (
    SEGMENT_KINDS,
    column_codes,
    lane_codes,
    segment_arrays,
    segment_groups,
)
from overlapscope.arrays import BoolArray, FloatArray, IntArray, ObjArray

SOURCE = len(SEGMENT_KINDS)  # kind code of a source node
COMM = SEGMENT_KINDS.index("comm")
# Windows are segmented together up to about this many events (graph._segment_batches).
BATCH_EVENTS = 1024


@dataclass(frozen=True, slots=True)
class Labels:
    """What the codes of :class:`Events` name: ``unit[code]`` etc. (code -1: none)."""

    unit: ObjArray
    phase: ObjArray
    group: ObjArray


@dataclass(frozen=True, slots=True)
class Events:
    """The event-table columns the graph reads, as arrays (one step, or all sorted by step);
    units, phases and groups as codes into ``labels``."""

    rank: IntArray
    step: IntArray
    ts: FloatArray
    end: FloatArray
    lane: IntArray  # code into SEGMENT_KINDS (3: any other lane), segments.lane_codes
    unit: IntArray
    phase: IntArray
    group: IntArray  # -1: none
    seq: IntArray
    labels: Labels

    @staticmethod
    def of(table: pd.DataFrame, rows: IntArray) -> Events:
        """From the event-table rows at positions ``rows``, sorted by step (stable)."""
        rows = rows[np.argsort(table["step"].to_numpy(np.int64)[rows], kind="stable")]
        unit, unit_names = column_codes(table["unit"], rows)
        phase, phase_names = column_codes(table["phase"], rows)
        group, group_names = column_codes(table["group"], rows)
        return Events(
            rank=table["rank"].to_numpy(np.int64)[rows],
            step=table["step"].to_numpy(np.int64)[rows],
            ts=table["ts_us"].to_numpy(np.float64)[rows],
            end=table["end_us"].to_numpy(np.float64)[rows],
            lane=lane_codes(table["lane"], rows),
            unit=unit,
            phase=phase,
            group=group,
            seq=table["seq"].to_numpy(np.int64)[rows],
            labels=Labels(unit_names, phase_names, group_names),
        )

    def take(self, at: IntArray | BoolArray | slice) -> Events:
        """The rows at ``at`` (positions, a mask or a slice), in order."""
        rows = {f: getattr(self, f)[at] for f in self.__slots__ if f != "labels"}
        return dataclasses.replace(self, **rows)


@dataclass(frozen=True, slots=True)
class StepGraph:
    rows: Events  # the step's events; node ``event`` positions index into it
    rank: IntArray
    kind: IntArray  # code into SEGMENT_KINDS, SOURCE for sources
    start: FloatArray
    end: FloatArray
    event: IntArray  # position in ``rows`` of the covering event, -1 for idle and sources
    key: IntArray  # collective code of comm nodes (same group and seq), -1 otherwise
    weight: FloatArray
    pred: IntArray  # previous node on the rank, -1 for a source
    base: FloatArray  # a source's time (the rank's step start); NaN otherwise
    arr_ptr: IntArray  # arrivals of node i: arr_idx[arr_ptr[i]:arr_ptr[i + 1]]
    arr_idx: IntArray
    anchors: IntArray  # sources and sync nodes, in a topological order
    anchor: IntArray  # per node: the last source or sync node at or before it on its rank
    start_us: float
    end_us: float


Windows = tuple[IntArray, FloatArray, FloatArray]  # rank, start_us, end_us; sorted by rank
Nodes = tuple[FloatArray, FloatArray, IntArray, IntArray, IntArray]  # start end kind event rank


def all_nodes(rows: Events, windows: Windows, window_step: IntArray) -> tuple[Nodes, IntArray]:
    """The nodes of every window at once (``windows`` of several steps, ``window_step`` each
    one's step, sorted by step then rank): per window its source, then its segments in time
    order (one :func:`segment_groups` pass over every rank and step). Also where each
    window's nodes begin (one more entry: the end). ``event``: positions in ``rows``."""
    w_rank, w_start, w_end = windows
    span = int(max(rows.rank.max(initial=0), w_rank.max(initial=0))) + 1
    w_key = window_step * span + w_rank
    key = rows.step * span + rows.rank
    at = np.minimum(np.searchsorted(w_key, key), max(len(w_key) - 1, 0))
    group = np.where(w_key[at] == key, at, -1) if len(w_key) else np.full(len(key), -1)
    s, e, k, ev, g = _segment_batches(group, rows, (w_start, w_end))
    counts = np.bincount(g, minlength=len(w_key)) + 1  # its segments and its source
    offset = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    is_seg = np.ones(int(offset[-1]), dtype=bool)
    is_seg[offset[:-1]] = False
    start, end = np.empty(len(is_seg)), np.empty(len(is_seg))
    kind, event = np.full(len(is_seg), SOURCE, dtype=np.int64), np.full(len(is_seg), -1)
    start[~is_seg], end[~is_seg] = w_start, w_start
    start[is_seg], end[is_seg], kind[is_seg], event[is_seg] = s, e, k, ev
    rank = np.repeat(w_rank.astype(np.int64), counts)
    return (start, end, kind, event.astype(np.int64), rank), offset


def _segment_batches(
    group: IntArray, rows: Events, bounds: tuple[FloatArray, FloatArray]
) -> tuple[FloatArray, FloatArray, IntArray, IntArray, IntArray]:
    """Consecutive windows holding fewer than :data:`BATCH_EVENTS` events together are cut in
    one :func:`segment_groups` pass (a pass costs mostly per call); a larger window is cut
    alone by :func:`segment_arrays`, whose sorts are cheaper at that size."""
    held = np.bincount(group[group >= 0], minlength=len(bounds[0]))
    batch = (np.cumsum(held) - held) // BATCH_EVENTS
    cuts = [*np.flatnonzero(np.diff(batch, prepend=-1)).tolist(), len(held)]
    parts = []
    for a, b in itertools.pairwise(cuts):
        mine = np.flatnonzero((group >= a) & (group < b))
        lane, ts, te = rows.lane[mine], rows.ts[mine], rows.end[mine]
        if b - a == 1:
            s, e, k, ev = segment_arrays(lane, ts, te, (bounds[0][a], bounds[1][a]))
            g = np.zeros(len(s), dtype=np.int64)
        else:
            window = (bounds[0][a:b], bounds[1][a:b])
            s, e, k, ev, g = segment_groups(group[mine] - a, lane, ts, te, window)
        parts.append((s, e, k, np.where(ev >= 0, mine[np.maximum(ev, 0)], -1), g + a))
    if not parts:
        return np.empty(0), np.empty(0), *(np.empty(0, dtype=np.int64),) * 3
    s, e, k, ev, g = (np.concatenate([p[i] for p in parts]) for i in range(5))
    return s, e, k, ev, g


def build_graph(rows: Events, windows: Windows, nodes: Nodes) -> StepGraph:
    """``rows``: the events of one step, every rank; ``windows``: ``rank, start_us, end_us``
    of that step per rank, sorted by rank; ``nodes``: theirs (:func:`all_nodes`, ``event``
    positions in ``rows``)."""
    start, end, kind, event, rank = nodes
    n = len(start)
    is_src = kind == SOURCE
    pred = np.arange(n, dtype=np.int64) - 1
    pred[is_src] = -1
    base = np.where(is_src, start, np.nan)
    weight = end - start
    ev_key = _collective_keys(rows)
    key = np.where((kind == COMM) & (event >= 0), ev_key[np.maximum(event, 0)], -1)
    sync, arr = _sync_edges(rows, ev_key, start, end, kind, event, rank)
    arr_end = end[arr]
    if len(sync):
        latest = np.full(n, -np.inf)
        np.maximum.at(latest, sync, arr_end)
        s_idx = np.unique(sync)
        begin = np.maximum(start[s_idx], latest[s_idx])
        weight[s_idx] = np.maximum(end[s_idx] - begin, 0.0)
    order = np.argsort(sync, kind="stable")
    sync, arr = sync[order], arr[order]
    arr_ptr = np.searchsorted(sync, np.arange(n + 1)).astype(np.int64)
    is_sync = np.zeros(n, dtype=bool)
    is_sync[sync] = True
    is_anchor = is_src | is_sync
    # the anchors in a topological order: by end, a source before a sync node ending with it
    at = np.flatnonzero(is_anchor)
    topo = at[np.lexsort((at, is_sync[at], end[at]))]
    return StepGraph(
        rows=rows,
        rank=rank,
        kind=kind,
        start=start,
        end=end,
        event=event,
        key=key,
        weight=weight,
        pred=pred,
        base=base,
        arr_ptr=arr_ptr,
        arr_idx=arr.astype(np.int64),
        anchors=topo.astype(np.int64),
        anchor=np.maximum.accumulate(np.where(is_anchor, np.arange(n), 0)).astype(np.int64),
        start_us=float(windows[1].min()),
        end_us=float(windows[2].max()),
    )


def _collective_keys(rows: Events) -> IntArray:
    """One code per collective (group, seq) for transfer rows; -1 for the other rows."""
    comm = (rows.lane == COMM) & (rows.seq >= 0) & (rows.group >= 0)
    if not comm.any():
        return np.full(len(comm), -1, dtype=np.int64)
    return np.where(comm, rows.group * (int(rows.seq.max()) + 2) + rows.seq, -1)


def _sync_edges(
    rows: Events,
    ev_key: IntArray,
    start: FloatArray,
    end: FloatArray,
    kind: IntArray,
    event: IntArray,
    rank: IntArray,
) -> tuple[IntArray, IntArray]:
    """Sync node and arrival node of every edge."""
    comm = np.flatnonzero(ev_key >= 0)
    if len(comm) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    ts = rows.ts[comm]
    c_rank = rows.rank[comm]
    # Arrival: the last node of the rank ending at or before the transfer's start (nodes of a
    # rank are contiguous and sorted, ranks in increasing order).
    arr = np.full(len(comm), -1, dtype=np.int64)
    for r in np.unique(c_rank):
        lo, hi = np.searchsorted(rank, [r, r + 1])
        mine = c_rank == r
        k = np.searchsorted(end[lo:hi], ts[mine], side="right") - 1
        arr[mine] = np.where(k >= 0, lo + k, -1)
    # Sync: the comm node of that transfer that ends with it.
    fin = np.full(len(rows.ts), -1, dtype=np.int64)
    cand = np.flatnonzero((kind == COMM) & (event >= 0))
    ends_with = np.abs(end[cand] - rows.end[event[cand]]) <= 1e-6
    fin[event[cand[ends_with]]] = cand[ends_with]
    # Every (sync of one rank, arrival of another) pair of the same collective.
    order = np.argsort(ev_key[comm], kind="stable")
    key, c_rank, fin_c, arr = ev_key[comm][order], c_rank[order], fin[comm][order], arr[order]
    lo = np.searchsorted(key, key, side="left")
    size = np.searchsorted(key, key, side="right") - lo
    me = np.repeat(np.arange(len(key)), size)
    peer = np.repeat(lo, size) + (np.arange(len(me)) - np.repeat(np.cumsum(size) - size, size))
    keep = (fin_c[me] >= 0) & (arr[peer] >= 0) & (c_rank[me] != c_rank[peer])
    s_node, a_node = fin_c[me[keep]], arr[peer[keep]]
    ok = end[a_node] <= end[s_node]
    return s_node[ok], a_node[ok]


def replay(graph: StepGraph, weight: FloatArray) -> tuple[FloatArray, IntArray]:
    """Longest path with ``weight``: every node's end and the predecessor that set it
    (-1 for sources). Between two anchors (sources, sync nodes) a rank's ends are a cumulative
    sum from the anchor; only the anchors are walked, in topological order, since each one
    waits on the ends of others: ``end(j) = end(anchor(j)) + cum(j) - cum(anchor(j))``."""
    cum = np.cumsum(weight)
    anchor = graph.anchor
    anchors = graph.anchors
    pred = graph.pred[anchors]
    lo, hi = graph.arr_ptr[anchors], graph.arr_ptr[anchors + 1]
    # Every node an anchor reads: its predecessor and its arrivals, as (anchor, offset).
    refs = np.concatenate([np.maximum(pred, 0), graph.arr_idx])
    ref_anchor = anchor[refs].tolist()
    ref_off = (cum[refs] - cum[anchor[refs]]).tolist()
    num = len(anchors)
    a_end: dict[int, float] = {}
    chosen = graph.pred.copy()
    base = graph.base[anchors].tolist()
    w = weight[anchors].tolist()
    for k, (i, p, a0, a1) in enumerate(
        zip(anchors.tolist(), pred.tolist(), lo.tolist(), hi.tolist(), strict=True)
    ):
        if p < 0:
            a_end[i] = base[k]
            continue
        best, arg = a_end[ref_anchor[k]] + ref_off[k], p
        for r in range(num + a0, num + a1):
            e = a_end.get(ref_anchor[r], -np.inf) + ref_off[r]
            if e > best:
                best, arg = e, int(graph.arr_idx[r - num])
        a_end[i] = best + w[k]
        chosen[i] = arg
    ends = np.asarray([a_end[j] for j in anchors.tolist()])
    at = np.empty(len(weight))
    at[anchors] = ends
    return at[anchor] + cum - cum[anchor], chosen


def replay_ends(graph: StepGraph, weights: FloatArray) -> FloatArray:
    """The step's end (the latest node end) for each column of ``weights`` (what-ifs, shape
    ``(num_nodes, num_whatifs)``): :func:`replay` of every column at once, one walk over the
    anchors with a vector per anchor, every chain recomputed (nothing subtracted)."""
    cum = np.cumsum(weights, axis=0)  # the same sums as replay's, column by column
    anchor, anchors = graph.anchor, graph.anchors
    slot = np.full(len(anchor), -1, dtype=np.int64)  # node -> row of a_end (anchors only)
    slot[anchors] = np.arange(len(anchors))
    # What each anchor reads, contiguous per anchor: its predecessor, then its arrivals.
    lo, hi = graph.arr_ptr[anchors], graph.arr_ptr[anchors + 1]
    size = hi - lo + 1
    ptr = np.concatenate([[0], np.cumsum(size)]).tolist()
    first = np.repeat(np.cumsum(size) - size, size)
    arrival = np.arange(len(first)) - first - 1  # -1: the predecessor
    owner = np.repeat(np.arange(len(anchors)), size)
    arrivals = np.append(graph.arr_idx, 0)  # [-1]: a placeholder where none is read
    refs = np.where(
        arrival < 0,
        np.maximum(graph.pred[anchors][owner], 0),
        arrivals[np.where(arrival < 0, -1, lo[owner] + arrival)],
    )
    ref_slot = slot[anchor[refs]]
    ref_off = cum[refs] - cum[anchor[refs]]
    a_end = np.full((len(anchors), weights.shape[1]), -np.inf)  # filled in topological order
    w = weights[anchors]
    is_source = graph.pred[anchors] < 0
    for k, i in enumerate(anchors.tolist()):
        if is_source[k]:
            a_end[k] = graph.base[i]
            continue
        at = slice(ptr[k], ptr[k + 1])
        a_end[k] = (a_end[ref_slot[at]] + ref_off[at]).max(axis=0) + w[k]
    # Weights are >= 0, so after each anchor a rank's ends grow (rounding is monotone too):
    # the latest end is that of a node just before an anchor, or of the last node.
    start = np.sort(anchors)
    last = np.append(start[1:] - 1, len(anchor) - 1)
    ends: FloatArray = (a_end[slot[start]] + cum[last] - cum[start]).max(axis=0)
    return ends
