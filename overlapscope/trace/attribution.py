"""What the producers' labelling shares (``overlapscope/trace/producers/``).

:class:`RowContext` (per-row facts of one rank), :class:`Labels` (the columns being
filled), :func:`innermost_containing` (which profiler range holds each point),
:func:`launch_anchor` (each row's launch) and :func:`holder` (which range holds each
collective's anchor); :func:`label_categorical` (a filled column as the table's
categorical).

A collective's *anchor* is where it was issued: for a GPU kernel its launch (same correlation
id) on the launching thread, for a gloo op its own start (looked up on every non-gloo thread).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.arrays import BoolArray, FloatArray, IntArray, ObjArray


@dataclass(frozen=True, slots=True)
class RowContext:
    """Per-row facts of one rank (read-only) shared by the labelling functions."""

    ts: FloatArray
    end: FloatArray
    tid: IntArray
    on_gpu: BoolArray
    on_gloo_thread: BoolArray
    anchor_ts: FloatArray
    anchor_tid: IntArray
    step: IntArray
    comm_rows: IntArray
    issued_by: (
        IntArray  # a folded transfer's issue range row (trace/recognize/p2p.py); -1 otherwise
    )


@dataclass(frozen=True, slots=True)
class Labels:
    """The per-row columns being filled (object arrays, changed in place)."""

    lane: ObjArray
    phase: ObjArray
    unit: ObjArray
    kind: ObjArray
    group: ObjArray


def innermost_containing(starts: FloatArray, ends: FloatArray, points: FloatArray) -> IntArray:
    """Index of the innermost range ``[start, end]`` holding each point, or -1.

    Ranges are profiler ranges (properly nested); they are split into nesting levels, each a
    set of disjoint ranges searched with ``searchsorted``; the deepest level that holds the
    point wins.
    """
    out = np.full(len(points), -1, dtype=np.int64)
    if len(starts) == 0 or len(points) == 0:
        return out
    s_sorted = np.sort(starts)
    e_sorted = np.sort(ends)
    # Ranges already open at a range's start (ties: earlier index counts as the parent).
    opened = np.searchsorted(s_sorted, starts, side="right")
    closed = np.searchsorted(e_sorted, starts, side="right")
    depth = opened - closed - 1
    for d in np.unique(depth):
        idx = np.flatnonzero(depth == d)
        idx = idx[np.argsort(starts[idx], kind="stable")]
        i = np.searchsorted(starts[idx], points, side="right") - 1
        ok = i >= 0
        hit = np.zeros(len(points), dtype=bool)
        hit[ok] = points[ok] <= ends[idx[i[ok]]]
        out[hit] = idx[i[hit]]
    return out


def innermost_on_threads(
    starts: FloatArray, ends: FloatArray, tids: IntArray, points: FloatArray, point_tids: IntArray
) -> IntArray:
    """For each point: the index of the innermost range on the point's own thread holding it
    (:func:`innermost_containing` per thread), or -1."""
    out = np.full(len(points), -1, dtype=np.int64)
    for t in np.unique(point_tids):
        q = np.flatnonzero(point_tids == t)
        on_t = np.flatnonzero(tids == t)
        hit = innermost_containing(starts[on_t], ends[on_t], points[q])
        out[q[hit >= 0]] = on_t[hit[hit >= 0]]
    return out


def launch_anchor(frame: pd.DataFrame) -> tuple[FloatArray, IntArray, BoolArray]:
    """For each row: ts and tid of the CPU event with the same correlation id (the launch);
    a row without one anchors on itself. Third: GPU rows whose launch is not in the trace
    while the trace does record launches (they belong to no profiled step, as in HTA)."""
    ts = frame["ts_us"].to_numpy()
    tid = frame["tid"].to_numpy()
    corr = frame["correlation"].to_numpy()
    on_gpu = frame["on_gpu"].to_numpy()
    anchor_ts, anchor_tid = ts.copy(), np.full(len(ts), -1, dtype=np.int64)
    anchor_tid[~on_gpu] = tid[~on_gpu]
    orphan = np.zeros(len(ts), dtype=bool)
    gpu, rows = launch_rows(corr, on_gpu)
    if not (~on_gpu & (corr >= 0)).any():
        return anchor_ts, anchor_tid, orphan
    anchor_ts[gpu] = ts[rows]
    anchor_tid[gpu] = tid[rows]
    orphan[on_gpu] = True
    orphan[gpu] = False
    return anchor_ts, anchor_tid, orphan


def launch_rows(corr: IntArray, on_gpu: BoolArray) -> tuple[IntArray, IntArray]:
    """The GPU rows whose launch is in the rows (``corr``: each row's correlation id, -1:
    none), and for each the CPU row that launched it: the first CPU row of its id."""
    cpu = np.flatnonzero(~on_gpu & (corr >= 0))
    gpu = np.flatnonzero(on_gpu & (corr >= 0))
    if not len(cpu) or not len(gpu):
        return gpu[:0], cpu[:0]
    # Each id's first CPU row (np.unique's indices are first occurrences), then each GPU
    # row's id looked up by binary search.
    ids, first = np.unique(corr[cpu], return_index=True)
    pos = np.minimum(np.searchsorted(ids, corr[gpu]), len(ids) - 1)
    found = ids[pos] == corr[gpu]
    return gpu[found], cpu[first[pos[found]]]


def holder(ctx: RowContext, range_rows: IntArray) -> IntArray:
    """For each comm row: the innermost of ``range_rows`` holding its anchor (row index),
    -1 if none. GPU kernels look on their launching thread, gloo ops on every thread given."""
    comm = ctx.comm_rows
    out = np.full(len(comm), -1, dtype=np.int64)
    gpu = ctx.on_gpu[comm]
    if (~gpu).any():
        q = np.flatnonzero(~gpu)
        hit = innermost_containing(ctx.ts[range_rows], ctx.end[range_rows], ctx.anchor_ts[comm[q]])
        out[q[hit >= 0]] = range_rows[hit[hit >= 0]]
    for t in np.unique(ctx.anchor_tid[comm[gpu]]):
        q = np.flatnonzero(gpu & (ctx.anchor_tid[comm] == t))
        rng = range_rows[ctx.tid[range_rows] == t]
        hit = innermost_containing(ctx.ts[rng], ctx.end[rng], ctx.anchor_ts[comm[q]])
        out[q[hit >= 0]] = rng[hit[hit >= 0]]
    return out


def label_categorical(values: ObjArray, categories: list[str] | None = None) -> pd.Categorical:
    """``pd.Categorical(values, categories)`` of a label column (strings or None, a few
    distinct ones repeated), from one hashing pass (``pd.factorize``) over the rows that are
    not None and the few distinct values: pandas would hash every row again against the categories (through an Arrow
    string array when it infers them). ``categories`` None: the strings present, sorted, as
    pandas infers them."""
    missing = pd.isna(values)  # None (and NaN), as factorize takes them: code -1
    if missing.any():  # most rows of most label columns: only the others are hashed
        found = np.full(len(values), -1, dtype=np.intp)
        found[~missing], distinct = pd.factorize(values[~missing])
    else:
        found, distinct = pd.factorize(values)
    present = distinct.tolist()
    if not present:  # all missing: the categorical pandas makes of them, from the codes
        empty = pd.Index([], dtype=object) if categories is None else categories
        return pd.Categorical.from_codes(found, categories=empty)
    if not all(type(v) is str for v in present):
        return pd.Categorical(values, categories=categories)  # odd values
    cats = sorted(present) if categories is None else categories
    index = {c: i for i, c in enumerate(cats)}
    lookup = np.asarray([index.get(v, -1) for v in present], dtype=np.int64)
    codes = np.where(found >= 0, lookup[np.maximum(found, 0)], -1)
    return pd.Categorical.from_codes(codes, categories=cats)
