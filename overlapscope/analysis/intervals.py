"""Interval-set maths, vectorised in numpy.

An :class:`Intervals` is a sorted set of disjoint half-open intervals ``[start, end)``; build
one from any (overlapping, unsorted) starts and ends with :func:`union`. Every operation is
O(n log n) numpy work, no Python loop over intervals::

    a:        [0------4)      [6--8)
    b:            [2------------7)
    a & b:        [2--4)      [6-7)        intersect(a, b)
    a - b:    [0--2)              [7-8)    subtract(a, b)
    a | b:    [0--------------------8)     union_of(a, b)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from overlapscope.arrays import BoolArray, FloatArray


@dataclass(frozen=True, slots=True)
class Intervals:
    """Sorted, disjoint, non-empty half-open intervals."""

    starts: FloatArray
    ends: FloatArray

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def total(self) -> float:
        """Summed length."""
        return float(np.sum(self.ends - self.starts))

    @staticmethod
    def empty() -> Intervals:
        return Intervals(np.empty(0, np.float64), np.empty(0, np.float64))


def union(starts: npt.ArrayLike, ends: npt.ArrayLike) -> Intervals:
    """Merge any intervals into a disjoint sorted set (touching intervals merge; empty or
    negative-length ones are dropped)."""
    s = np.asarray(starts, dtype=np.float64)
    e = np.asarray(ends, dtype=np.float64)
    if s.shape != e.shape:
        raise ValueError(f"starts {s.shape} and ends {e.shape} differ in shape")
    keep = e > s
    s, e = s[keep], e[keep]
    if len(s) == 0:
        return Intervals.empty()
    order = np.argsort(s, kind="stable")
    return _merge_sorted(s[order], e[order])


def _merge_sorted(s: FloatArray, e: FloatArray) -> Intervals:
    """:func:`union` of non-empty intervals sorted by start (a stable sort leaves them as
    they are)."""
    if len(s) == 0:
        return Intervals.empty()
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    return Intervals(s[first], np.maximum.reduceat(e, first))


def union_of(*sets: Intervals) -> Intervals:
    return union(
        np.concatenate([x.starts for x in sets]) if sets else [],
        np.concatenate([x.ends for x in sets]) if sets else [],
    )


def _inside(a: Intervals, t: FloatArray) -> npt.NDArray[np.bool_]:
    """For each point t: is it in [start, end) of some interval of ``a``."""
    i = np.searchsorted(a.starts, t, side="right") - 1
    ok = i >= 0
    out = np.zeros(len(t), dtype=bool)
    out[ok] = t[ok] < a.ends[i[ok]]
    return out


def _segments(a: Intervals, b: Intervals) -> tuple[FloatArray, FloatArray, BoolArray, BoolArray]:
    """The elementary segments ``[lo, hi)`` between the endpoints of ``a`` and ``b``, and
    whether each lies in ``a`` and in ``b``: sorted, non-empty (the endpoints are distinct
    and never NaN: every set is made by :func:`union` or :func:`clip`, which drop empty and
    NaN intervals)."""
    cuts = np.unique(np.concatenate([a.starts, a.ends, b.starts, b.ends]))
    lo, hi = cuts[:-1], cuts[1:]
    mid = lo + (hi - lo) / 2
    return lo, hi, _inside(a, mid), _inside(b, mid)


def _combine(a: Intervals, b: Intervals, keep_a: bool, keep_b: bool, both: bool) -> Intervals:
    """Elementary-segment boolean op: keep a segment when its membership pattern says so."""
    # An empty set's segments are all outside it: none kept but by the other set's flag
    if (not len(a) and not (keep_b and len(b))) or (not len(b) and not (keep_a and len(a))):
        return Intervals.empty()
    lo, hi, in_a, in_b = _segments(a, b)
    if len(lo) < 1:
        return Intervals.empty()
    sel = (in_a & in_b & both) | (in_a & ~in_b & keep_a) | (~in_a & in_b & keep_b)
    return _merge_sorted(lo[sel], hi[sel])


def split(a: Intervals, b: Intervals) -> tuple[Intervals, Intervals]:
    """``(subtract(a, b), intersect(a, b))``, from one pass over the segments."""
    if len(a) == 0:  # (both keep segments of a only: none is cut)
        return Intervals.empty(), Intervals.empty()
    lo, hi, in_a, in_b = _segments(a, b)
    if len(lo) < 1:
        return Intervals.empty(), Intervals.empty()
    only_a, both = in_a & ~in_b, in_a & in_b
    return _merge_sorted(lo[only_a], hi[only_a]), _merge_sorted(lo[both], hi[both])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    return _combine(a, b, keep_a=False, keep_b=False, both=True)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Parts of ``a`` not covered by ``b``."""
    return _combine(a, b, keep_a=True, keep_b=False, both=False)


def clip(a: Intervals, lo: float, hi: float) -> Intervals:
    """The part of ``a`` inside ``[lo, hi)`` (a slice of the sorted set: O(log n + k))."""
    if hi <= lo or len(a) == 0:
        return Intervals.empty()
    first = int(np.searchsorted(a.ends, lo, side="right"))
    last = int(np.searchsorted(a.starts, hi, side="left"))
    if first >= last:
        return Intervals.empty()
    starts = np.maximum(a.starts[first:last], lo)
    ends = np.minimum(a.ends[first:last], hi)
    keep = ends > starts
    return Intervals(starts[keep], ends[keep])


def covered(a: Intervals, starts: npt.ArrayLike, ends: npt.ArrayLike) -> FloatArray:
    """For each query ``[start, end)``: how much of it ``a`` covers (vectorised over queries)."""
    qs = np.asarray(starts, dtype=np.float64)
    qe = np.maximum(np.asarray(ends, dtype=np.float64), qs)
    if len(a) == 0:
        return np.zeros(len(qs), dtype=np.float64)
    lengths = a.ends - a.starts
    before = np.concatenate([[0.0], np.cumsum(lengths)])

    def upto(t: FloatArray) -> FloatArray:
        i = np.searchsorted(a.starts, t, side="right") - 1
        j = np.maximum(i, 0)
        part = np.clip(t - a.starts[j], 0.0, lengths[j])
        return np.where(i >= 0, before[j] + part, 0.0)

    return upto(qe) - upto(qs)


def gaps(a: Intervals, lo: float, hi: float) -> Intervals:
    """The complement of ``a`` within ``[lo, hi)``."""
    return subtract(union([lo], [hi]), a)


def complement(a: Intervals, lo: float, hi: float) -> Intervals:
    """:func:`gaps`, read off the sorted set in one pass (O(n), no sort): the same set
    (where endpoints one ulp apart make :func:`gaps`' midpoints round, this one keeps the
    endpoints exactly)."""
    if not hi > lo:  # (NaN bounds too: nothing)
        return Intervals.empty()
    inside = clip(a, lo, hi)
    starts = np.concatenate([[lo], inside.ends])
    ends = np.concatenate([inside.starts, [hi]])
    keep = ends > starts
    return Intervals(starts[keep], ends[keep])


def free_within(
    a: Intervals, starts: FloatArray, ends: FloatArray
) -> tuple[npt.NDArray[np.int64], FloatArray, FloatArray]:
    """For each query ``[start, end)``: the stretches of it ``a`` does not cover, as
    ``(query index, start, end)`` of each stretch, queries in order (one complement of
    ``a`` for all the queries, each cut from it by binary search)."""
    if not len(starts):
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)
    free = complement(a, float(np.min(starts)), float(np.max(ends)))
    lo = np.searchsorted(free.ends, starts, side="right")
    hi = np.searchsorted(free.starts, ends, side="left")
    count = np.maximum(hi - lo, 0)
    row = np.repeat(np.arange(len(starts)), count)
    at = np.repeat(lo - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
    s = np.maximum(free.starts[at], starts[row]) if len(at) else np.zeros(0)
    e = np.minimum(free.ends[at], ends[row]) if len(at) else np.zeros(0)
    keep = e > s
    return row[keep], s[keep], e[keep]
