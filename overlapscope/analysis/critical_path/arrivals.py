"""Which arrivals each sync node of a step's graph waits on, O(ranks) per collective.

A sync node of rank r (the node that ends with r's transfer of a collective) waits on the
arrival of every other rank at that collective (the node of that rank ending where its
transfer starts) recorded no later than the sync node's end. Rather than one edge per
(sync node, arrival) pair, the arrivals of a collective are kept once, sorted so that what a
sync node waits on is a prefix of them, less its own rank's: by recorded end for the
weights (:func:`waited`), by recorded end then walk order for the replay (:func:`readable`).
The latest of a prefix less one rank is the prefix's latest, or, when that one is of the
rank left out, the latest of the others: what
:func:`overlapscope.analysis.critical_path.graph.replay`
keeps as it folds a prefix in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from overlapscope.arrays import FloatArray, IntArray


@dataclass(frozen=True, slots=True)
class Arrivals:
    """Per transfer row of the step (a comm event of a collective), in row order: its
    collective's code, its rank, its arrival node and its sync node (-1: none)."""

    key: IntArray
    rank: IntArray
    arrival: IntArray
    sync: IntArray


def collective_rows(
    ts: FloatArray,
    row_end: FloatArray,
    row_rank: IntArray,
    ev_key: IntArray,
    nodes: tuple[FloatArray, IntArray, IntArray, IntArray],
) -> Arrivals:
    """The transfer rows (``ev_key >= 0``) of the step's rows (``ts``, ``row_end``,
    ``row_rank``) and the nodes ``(end, kind_is_comm, event, rank)`` cut from them."""
    end, is_comm, event, rank = nodes
    comm = np.flatnonzero(ev_key >= 0)
    c_ts, c_rank = ts[comm], row_rank[comm]
    # Arrival: the last node of the rank ending at or before the transfer's start (nodes of a
    # rank are contiguous and sorted, ranks in increasing order).
    arr = np.full(len(comm), -1, dtype=np.int64)
    for r in np.unique(c_rank):
        lo, hi = np.searchsorted(rank, [r, r + 1])
        mine = c_rank == r
        k = np.searchsorted(end[lo:hi], c_ts[mine], side="right") - 1
        arr[mine] = np.where(k >= 0, lo + k, -1)
    # Sync: the comm node of that transfer that ends with it.
    fin = np.full(len(ts), -1, dtype=np.int64)
    cand = np.flatnonzero(is_comm & (event >= 0))
    ends_with = np.abs(end[cand] - row_end[event[cand]]) <= 1e-6
    fin[event[cand[ends_with]]] = cand[ends_with]
    return Arrivals(ev_key[comm], c_rank.astype(np.int64), arr, fin[comm])


def _count_before(entries: list[np.ndarray], queries: list[np.ndarray], ties: int) -> IntArray:
    """Per query, how many entries come before it when both are sorted by the same keys
    (most significant last, as :func:`numpy.lexsort`); on equal keys the entries come first
    when ``ties`` is 1 (``<=``), the query when 0 (``<``)."""
    n, m = len(entries[0]), len(queries[0])
    flag = np.concatenate([np.full(n, 1 - ties), np.full(m, ties)])
    cols = [np.concatenate([e, q]) for e, q in zip(entries, queries, strict=True)]
    order = np.lexsort([flag, *cols])
    before = np.cumsum(order < n)
    out = np.empty(m, dtype=np.int64)
    at = order >= n
    out[order[at] - n] = before[at]
    return out


def waited(arr: Arrivals, end: FloatArray) -> tuple[IntArray, FloatArray]:
    """The sync nodes that wait on at least one arrival, and the latest recorded end of the
    arrivals each waits on (other ranks, ending no later than the sync node)."""
    has = np.flatnonzero(arr.arrival >= 0)
    ent = has[np.lexsort((end[arr.arrival[has]], arr.key[has]))]
    e_key, e_rank, e_end = arr.key[ent], arr.rank[ent], end[arr.arrival[ent]]
    q = np.flatnonzero(arr.sync >= 0)
    q_key, q_rank, q_end = arr.key[q], arr.rank[q], end[arr.sync[q]]
    lo = np.searchsorted(e_key, q_key, side="left")
    hi = _count_before([e_end, e_key], [q_end, q_key], ties=1)
    # the latest entry of another rank at or before i: i, or the one before i's run of rank
    pos = np.arange(len(ent))
    new_run = np.ones(len(ent), dtype=bool)
    new_run[1:] = (e_rank[1:] != e_rank[:-1]) | (e_key[1:] != e_key[:-1])
    other = np.maximum.accumulate(np.where(new_run, pos, 0)) - 1
    last = np.maximum(hi - 1, 0)
    pick = np.where(e_rank[last] != q_rank, last, other[last]) if len(ent) else last
    ok = (hi > lo) & (pick >= lo)
    return arr.sync[q[ok]], e_end[pick[ok]]


def readable(
    arr: Arrivals, end: FloatArray, walk: IntArray, syncs: IntArray
) -> tuple[IntArray, IntArray, IntArray, IntArray, IntArray]:
    """The arrivals of every collective once, sorted by (collective, recorded end, ``walk``:
    when the replay has the node's end), and per node of ``syncs`` the range of them it
    reads: those before it in that order, whose ends the replay has all computed by then. The
    one arrival that can end no later than the sync node and yet come after it (ending with
    it, at a sync node walked later) was never waited on before either: the replay of every
    pair read its end as not yet computed (-inf).
    Returns the arrivals' node, rank and row position, and per sync node ``lo``, ``hi``."""
    has = np.flatnonzero(arr.arrival >= 0)
    a_node = arr.arrival[has]
    ent = has[np.lexsort((has, walk[a_node], end[a_node], arr.key[has]))]
    e_node, e_key = arr.arrival[ent], arr.key[ent]
    is_q = np.zeros(len(end), dtype=bool)
    is_q[syncs] = True
    q = np.flatnonzero((arr.sync >= 0) & is_q[np.maximum(arr.sync, 0)])
    s_node, q_key = arr.sync[q], arr.key[q]
    lo = np.searchsorted(e_key, q_key, side="left")
    hi = _count_before(
        [walk[e_node], end[e_node], e_key], [walk[s_node], end[s_node], q_key], ties=0
    )
    node_lo = np.zeros(len(end), dtype=np.int64)
    node_hi = np.zeros(len(end), dtype=np.int64)
    node_lo[s_node], node_hi[s_node] = lo, hi
    return e_node, arr.rank[ent], ent, node_lo, node_hi
