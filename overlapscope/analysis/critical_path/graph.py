"""The dependency graph of one step across ranks, and its replay (longest path).

Nodes: per rank a source (the rank's step start) followed by its segments in time order
(:func:`overlapscope.analysis.segments.segment_groups`). A node starts when its predecessor on
the same rank ends; a *sync* node (the last exposed segment of a collective on a rank, which
ends when the collective ends) also waits for the arrival of every other rank at that
collective: the node of that rank that ends where its transfer starts. Weights are set so the
replay of the recorded weights gives back the recorded ends: a plain node weighs its duration,
a sync node ``end - max(start, latest arrival)`` (the transfer after the last rank arrived).
An arrival recorded after the collective's end (clock noise) is dropped.

A sync node waits on the latest of its arrivals, so the arrivals are not edges of every
(sync, arrival) pair (ranks² per collective): each collective keeps its arrivals once, in
the order they can be read (:mod:`overlapscope.analysis.critical_path.arrivals`), and a sync node
reads a
prefix of them; the replay folds each prefix into a running best (and best of another rank,
a sync node not waiting on its own rank) as it goes, so a collective costs O(ranks).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.analysis.critical_path.arrivals import collective_rows, readable, waited
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
    # Arrivals, grouped by collective: node, its rank, its rank in the order a sync node
    # prefers among equal ends (the earlier transfer row). Sync node i waits on the
    # arrivals arr_lo[i]:arr_hi[i] not of its own rank (an empty range: not a sync node).
    arr_idx: IntArray
    arr_rank: IntArray
    arr_pos: IntArray
    arr_lo: IntArray
    arr_hi: IntArray
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
    arr = collective_rows(rows.ts, rows.end, rows.rank, ev_key, (end, kind == COMM, event, rank))
    sync, latest = waited(arr, end)
    begin = np.maximum(start[sync], latest)
    weight[sync] = np.maximum(end[sync] - begin, 0.0)
    is_sync = np.zeros(n, dtype=bool)
    is_sync[sync] = True
    is_anchor = is_src | is_sync
    # the anchors in a topological order: by end, a source before a sync node ending with it
    at = np.flatnonzero(is_anchor)
    topo = at[np.lexsort((at, is_sync[at], end[at]))]
    anchor = np.maximum.accumulate(np.where(is_anchor, np.arange(n), 0)).astype(np.int64)
    walk = np.empty(n, dtype=np.int64)  # when the replay has each node's end
    walk[topo] = np.arange(len(topo))
    walk = walk[anchor]
    arr_idx, arr_rank, arr_pos, arr_lo, arr_hi = readable(arr, end, walk, sync)
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
        arr_idx=arr_idx,
        arr_rank=arr_rank,
        arr_pos=arr_pos,
        arr_lo=arr_lo,
        arr_hi=arr_hi,
        anchors=topo.astype(np.int64),
        anchor=anchor,
        start_us=float(windows[1].min()),
        end_us=float(windows[2].max()),
    )


def _collective_keys(rows: Events) -> IntArray:
    """One code per collective (group, seq) for transfer rows; -1 for the other rows."""
    comm = (rows.lane == COMM) & (rows.seq >= 0) & (rows.group >= 0)
    if not comm.any():
        return np.full(len(comm), -1, dtype=np.int64)
    return np.where(comm, rows.group * (int(rows.seq.max()) + 2) + rows.seq, -1)


Best = tuple[float, int, int, int]  # an arrival's end, minus its row position, rank, node
NONE: Best = (-np.inf, 0, -1, -1)


def _fold(top: list[Best], new: Best) -> None:
    """Keep in ``top`` the latest arrival (the earlier row on equal ends) and the latest of
    the other ranks than its own."""
    best, other = top
    if new[:2] > best[:2]:
        top[:] = [new, best if best[2] != new[2] else other]
    elif new[2] != best[2] and new[:2] > other[:2]:
        top[1] = new


def replay(graph: StepGraph, weight: FloatArray) -> tuple[FloatArray, IntArray]:
    """Longest path with ``weight``: every node's end and the predecessor that set it
    (-1 for sources). Between two anchors (sources, sync nodes) a rank's ends are a cumulative
    sum from the anchor; only the anchors are walked, in topological order, since each one
    waits on the ends of others: ``end(j) = end(anchor(j)) + cum(j) - cum(anchor(j))``.
    A sync node takes the latest arrival of another rank when it is later than its own
    predecessor (the earliest transfer row on a tie, the predecessor on a tie with it)."""
    cum = np.cumsum(weight)
    anchor, anchors, arrivals = graph.anchor, graph.anchors, graph.arr_idx
    pred = np.maximum(graph.pred[anchors], 0)
    p_anchor, p_off = anchor[pred].tolist(), (cum[pred] - cum[anchor[pred]]).tolist()
    e_anchor = anchor[arrivals].tolist()
    e_off = (cum[arrivals] - cum[anchor[arrivals]]).tolist()
    e_tie = (-graph.arr_pos).tolist()
    e_rank, e_node = graph.arr_rank.tolist(), arrivals.tolist()
    a_end: dict[int, float] = {}
    tops: dict[int, tuple[list[int], list[Best]]] = {}  # per collective: read up to, best
    chosen = graph.pred.copy()
    base, w = graph.base[anchors].tolist(), weight[anchors].tolist()
    rank, is_src = graph.rank[anchors].tolist(), (graph.pred[anchors] < 0).tolist()
    lo, hi = graph.arr_lo[anchors].tolist(), graph.arr_hi[anchors].tolist()
    for k, i in enumerate(anchors.tolist()):
        if is_src[k]:
            a_end[i] = base[k]
            continue
        best, arg = a_end[p_anchor[k]] + p_off[k], int(graph.pred[i])
        read, top = tops.setdefault(lo[k], ([lo[k]], [NONE, NONE]))
        for r in range(read[0], hi[k]):
            _fold(top, (a_end[e_anchor[r]] + e_off[r], e_tie[r], e_rank[r], e_node[r]))
        read[0] = max(read[0], hi[k])
        late = top[0] if top[0][2] != rank[k] else top[1]
        if late[0] > best:
            best, arg = late[0], late[3]
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
    anchor, anchors, arrivals = graph.anchor, graph.anchors, graph.arr_idx
    slot = np.full(len(anchor), -1, dtype=np.int64)  # node -> row of a_end (anchors only)
    slot[anchors] = np.arange(len(anchors))
    pred = np.maximum(graph.pred[anchors], 0)
    p_slot, p_off = slot[anchor[pred]], cum[pred] - cum[anchor[pred]]
    e_slot, e_off = slot[anchor[arrivals]], cum[arrivals] - cum[anchor[arrivals]]
    a_end = np.full((len(anchors), weights.shape[1]), -np.inf)  # filled in topological order
    w = weights[anchors]
    is_source = (graph.pred[anchors] < 0).tolist()
    rank = graph.rank[anchors].tolist()
    lo, hi = graph.arr_lo[anchors].tolist(), graph.arr_hi[anchors].tolist()
    tops: dict[int, list[np.ndarray]] = {}  # per collective: read up to, best two of ranks
    for k, i in enumerate(anchors.tolist()):
        if is_source[k]:
            a_end[k] = graph.base[i]
            continue
        best = a_end[p_slot[k]] + p_off[k]
        if hi[k] > lo[k]:
            top = tops.setdefault(lo[k], [np.asarray(lo[k]), *_no_arrival(weights.shape[1])])
            if hi[k] > top[0]:
                at = slice(int(top[0]), hi[k])
                top[:] = [
                    np.asarray(hi[k]),
                    *_fold_rows(top[1:], a_end[e_slot[at]] + e_off[at], graph.arr_rank[at]),
                ]
            late = np.where(top[2] != rank[k], top[1], top[3])
            best = np.maximum(best, late)
        a_end[k] = best + w[k]
    # Weights are >= 0, so after each anchor a rank's ends grow (rounding is monotone too):
    # the latest end is that of a node just before an anchor, or of the last node.
    start = np.sort(anchors)
    last = np.append(start[1:] - 1, len(anchor) - 1)
    ends: FloatArray = (a_end[slot[start]] + cum[last] - cum[start]).max(axis=0)
    return ends


def _no_arrival(num: int) -> list[np.ndarray]:
    """The best two of :func:`_fold_rows` before any arrival: none, of no rank."""
    none, no_rank = np.full(num, -np.inf), np.full(num, -1, dtype=np.int64)
    return [none, no_rank, none.copy(), no_rank.copy()]


def _fold_rows(top: list[np.ndarray], ends: FloatArray, rank: IntArray) -> list[np.ndarray]:
    """``top`` (per column: latest end, its rank, latest end of another rank, its rank) with
    the arrivals ``ends`` (one row each, of ``rank``) folded in."""
    val = np.vstack([top[0], top[2], ends])
    who = np.vstack([top[1], top[3], np.repeat(rank[:, None], ends.shape[1], axis=1)])
    cols = np.arange(val.shape[1])
    first = np.argmax(val, axis=0)
    first_rank = who[first, cols]
    rest = np.where(who != first_rank, val, -np.inf)
    second = np.argmax(rest, axis=0)
    return [val[first, cols], first_rank, rest[second, cols], who[second, cols]]
