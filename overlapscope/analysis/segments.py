"""One rank's step cut into what it was doing: compute, exposed communication, waiting, idle.

Input: the rank's events of one step (columns ``ts_us, end_us, lane, unit, phase, group, seq``
of the event table). Every start and end is a boundary; between two boundaries the rank is, by
priority, computing (a ``compute`` event covers the instant), communicating with nothing to
hide it (``comm``), blocked (``wait`` lane, no transfer in flight) or ``idle``. Each piece
names the event that covers it (for comm: the covering transfer that ends last). Consecutive
pieces of one kind and one event merge into a segment. The segments tile the window exactly::

    events   compute [==fwd A==]        [==fwd B==]
             comm           [=====ag B=====]
    segments [ compute A   ][ comm ag B ][ compute B ]
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
import pandas as pd

from overlapscope.arrays import FloatArray, IntArray
from overlapscope.phases import Lane

SEGMENT_KINDS = ("compute", "comm", "wait", "idle")
_LANES = (Lane.COMPUTE.value, Lane.COMM.value, Lane.WAIT.value)


def _categorical(column: pd.Series) -> pd.Categorical | None:
    """The column's categorical array (its codes and categories, no copies), or None."""
    array = column.array
    return array if isinstance(array, pd.Categorical) else None


def _positions(cat: pd.Categorical, wanted: list[object]) -> list[int]:
    """The codes of those of ``wanted`` that are categories of ``cat`` (a short list:
    cheaper than an index lookup)."""
    names = cat.categories.tolist()
    return [names.index(w) for w in wanted if w in names]


def column_in(
    column: pd.Series, values: Iterable[object], rows: IntArray | None = None
) -> npt.NDArray[np.bool_]:
    """Which rows of an event-table column (those at positions ``rows``; all: None) hold one
    of ``values``, as a numpy mask; on a categorical column (the loader's) from its integer
    codes, without comparing strings."""
    wanted = list(values)
    cat = _categorical(column)
    if cat is None:
        found = column.isin(wanted).to_numpy(bool)
        return found if rows is None else found[rows]
    codes = cat.codes if rows is None else cat.codes[rows]
    mask = np.zeros(len(codes), dtype=bool)
    for code in _positions(cat, wanted):  # a few values: compares beat a lookup table
        mask |= codes == code
    return mask


def column_values(column: pd.Series, rows: IntArray) -> npt.NDArray[np.object_]:
    """The values of ``column`` at positions ``rows`` as objects (NaN where missing), as
    ``column.iloc[rows].astype(object)`` gives them, from the codes of a categorical."""
    cat = _categorical(column)
    if cat is not None:
        names = np.append(cat.categories.to_numpy(dtype=object), np.nan)
        codes = cat.codes[rows]
        return names[np.where(codes >= 0, codes, len(names) - 1)]
    return column.iloc[rows].astype(object).to_numpy()


def column_codes(column: pd.Series, rows: IntArray) -> tuple[IntArray, npt.NDArray[np.object_]]:
    """``(codes, names)`` of the values at positions ``rows``: ``names[codes]`` are the
    values, code -1 where missing (a categorical's own codes and categories)."""
    cat = _categorical(column)
    if cat is not None:
        return cat.codes[rows].astype(np.int64), cat.categories.to_numpy(dtype=object)
    codes, uniques = pd.factorize(column.iloc[rows].astype(object).to_numpy())
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


def lane_codes(column: pd.Series, rows: IntArray) -> IntArray:
    """The lane of each row at ``rows`` as a code into :data:`SEGMENT_KINDS` (compute 0, comm
    1, wait 2); every other lane (step, issue, ...) is 3."""
    cat = _categorical(column)
    if cat is not None:
        lookup = np.full(len(cat.categories) + 1, 3, dtype=np.int64)  # [-1]: missing
        for code, name in enumerate(_LANES):
            lookup[_positions(cat, [name])] = code
        return lookup[cat.codes[rows]]
    out = np.full(len(rows), 3, dtype=np.int64)
    for code, name in enumerate(_LANES):
        out[column_in(column, [name])[rows]] = code
    return out


def _dense(values: FloatArray, *more: FloatArray) -> list[IntArray]:
    """Each array's values as their rank among all of them (equal values, equal ranks): order
    kept, so (group, value) pairs pack exactly into one sortable integer."""
    ranks = np.unique(np.concatenate([values, *more]), return_inverse=True)[1]
    cuts = np.cumsum([len(values), *(len(m) for m in more)])[:-1]
    return list(np.split(ranks.astype(np.int64), cuts))


def _covering_one(starts: FloatArray, ends: FloatArray, points: FloatArray) -> IntArray:
    """For each point, the index of an interval covering it (the one reaching furthest
    among those started at or before it), or -1."""
    if len(starts) == 0:
        return np.full(len(points), -1, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    pos = np.arange(len(e))
    # Position of the interval that holds the running maximum.
    holder = np.maximum.accumulate(np.where(e >= reach, pos, 0))
    j = np.searchsorted(s, points, side="right") - 1
    jj = np.maximum(j, 0)
    hit = (j >= 0) & (reach[jj] > points)
    return np.where(hit, order[holder[jj]], -1).astype(np.int64)


def covering(
    group: IntArray, starts: FloatArray, ends: FloatArray, p_group: IntArray, points: FloatArray
) -> IntArray:
    """For each point, the index of an interval of its group covering it (the one reaching
    furthest among those started at or before it; ties: the latest in start order, stable),
    or -1. ``p_group`` sorted; every group at once."""
    if len(starts) == 0:
        return np.full(len(points), -1, dtype=np.int64)
    order = np.lexsort((starts, group))
    g, s, e = group[order], starts[order], ends[order]
    e_rank, s_rank, p_rank = _dense(e, s, points)
    span = int(max(e_rank.max(), s_rank.max(), p_rank.max())) + 1
    # Running maximum of the ends within each group: the group leads the packed key.
    reach_rank = np.maximum.accumulate(g * span + e_rank) - g * span
    holds = e_rank >= reach_rank  # the interval holds its group's running maximum
    holder = np.maximum.accumulate(np.where(holds, np.arange(len(e)), 0))
    j = np.searchsorted(g * span + s_rank, p_group * span + p_rank, side="right") - 1
    jj = np.maximum(j, 0)
    hit = (j >= 0) & (g[jj] == p_group) & (reach_rank[jj] > p_rank)
    return np.where(hit, order[holder[jj]], -1).astype(np.int64)


def segment_groups(
    group: IntArray, lane: IntArray, s: FloatArray, e: FloatArray, windows: tuple[FloatArray, ...]
) -> tuple[FloatArray, FloatArray, IntArray, IntArray, IntArray]:
    """:func:`segment_arrays` of many windows at once: ``group`` is each event's window
    (index into ``windows = (lo, hi)``; -1: none). Returns ``(starts, ends, kinds, events,
    groups)``, the segments of window 0 first, each window's in time order."""
    lo, hi = windows
    use = (lane < 3) & (group >= 0)
    g_use = group[use]
    values = np.concatenate([lo, hi, s[use], e[use]])
    b_group = np.concatenate([np.arange(len(lo)), np.arange(len(lo)), g_use, g_use])
    values = np.clip(values, lo[b_group], hi[b_group])
    order = np.lexsort((values, b_group))
    bounds, b_group = values[order], b_group[order]
    fresh = np.ones(len(bounds), dtype=bool)  # np.unique per window
    fresh[1:] = (b_group[1:] != b_group[:-1]) | (bounds[1:] != bounds[:-1])
    bounds, b_group = bounds[fresh], b_group[fresh]
    left = np.flatnonzero(b_group[:-1] == b_group[1:])  # each piece: bounds[left], next
    mids, m_group = (bounds[left] + bounds[left + 1]) / 2, b_group[left]
    kind = np.full(len(mids), 3, dtype=np.int64)
    event = np.full(len(mids), -1, dtype=np.int64)
    # Lowest priority first, so compute overwrites comm overwrites wait.
    for code in (2, 1, 0):
        idx = np.flatnonzero((lane == code) & (group >= 0))
        cov = covering(group[idx], s[idx], e[idx], m_group, mids)
        hit = cov >= 0
        kind[hit] = code
        event[hit] = idx[cov[hit]]
    new = np.ones(len(mids), dtype=bool)
    new[1:] = (kind[1:] != kind[:-1]) | (event[1:] != event[:-1]) | (m_group[1:] != m_group[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(mids)) - 1
    start, end = bounds[left[first]], bounds[left[last] + 1]
    return start, end, kind[first], event[first], m_group[first]


def segment_arrays(
    lane: IntArray, s: FloatArray, e: FloatArray, window: tuple[float, float]
) -> tuple[FloatArray, FloatArray, IntArray, IntArray]:
    """``(starts, ends, kind codes into SEGMENT_KINDS, event positions or -1)`` tiling
    ``window``, from one rank's events of one step (their lane codes (:func:`lane_codes`),
    starts and ends)."""
    lo, hi = window
    use = lane < 3
    bounds = np.unique(np.clip(np.concatenate([[lo, hi], s[use], e[use]]), lo, hi))
    if len(bounds) < 2:
        n = int(hi > lo)
        return (
            np.full(n, lo),
            np.full(n, hi),
            np.full(n, 3, dtype=np.int64),
            np.full(n, -1, dtype=np.int64),
        )
    mids = (bounds[:-1] + bounds[1:]) / 2
    kind = np.full(len(mids), 3, dtype=np.int64)
    event = np.full(len(mids), -1, dtype=np.int64)
    # Lowest priority first, so compute overwrites comm overwrites wait.
    for code in (2, 1, 0):
        idx = np.flatnonzero(lane == code)
        cov = _covering_one(s[idx], e[idx], mids)
        hit = cov >= 0
        kind[hit] = code
        event[hit] = idx[cov[hit]]
    new = np.ones(len(mids), dtype=bool)
    new[1:] = (kind[1:] != kind[:-1]) | (event[1:] != event[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(mids)) - 1
    return bounds[first], bounds[last + 1], kind[first], event[first]


def segments(rows: pd.DataFrame, window: tuple[float, float]) -> pd.DataFrame:
    """Segments tiling ``window``: ``start_us, end_us, kind, event`` (``event``: the position
    in ``rows`` of the covering event, -1 for idle)."""
    start, end, kind, event = segment_arrays(
        lane_codes(rows["lane"], np.arange(len(rows))),
        rows["ts_us"].to_numpy(np.float64),
        rows["end_us"].to_numpy(np.float64),
        window,
    )
    names = np.asarray(SEGMENT_KINDS, dtype=object)[kind]
    return pd.DataFrame({"start_us": start, "end_us": end, "kind": names, "event": event})
