"""How far each rank's clock can be from the reference's: an interval from causality.

Whatever the clocks, a collective's data cannot arrive before it is sent. So, with ``o_r``
the offset of rank r's clock (its times minus the reference's, for one moment)::

    no rank ends a synchronising collective before its last rank started it:
        end_i - o_i >= start_j - o_j          ->  o_i - o_j <= end_i - start_j
    no receive ends before its send started:
        end_recv - o_recv >= start_send - o_send

Every matched collective (all-gather, reduce-scatter, all-reduce, all-to-all, barrier; a
send matched with its receives) gives such differences; together they bound each
``o_r - o_ref`` from below and above (the shortest paths of the difference constraints,
relaxed collective by collective until nothing changes: a rank bounded only through another
rank gets that rank's bounds too). The bounds are hard: no clock outside them is consistent
with the trace. They are loose where every collective is long (a bound is at best the
shortest transfer away from the truth), and one-sided when one rank always arrives last
(its lateness and a clock offset look the same).

The collectives' ends add softer evidence (clocks.py: a synchronising collective ends on
every rank at nearly the same moment): the offset lies within the range of the end
differences as far as their scatter goes. ``plausible`` is the causal interval cut to the
middle 90% of them; comparisons of ranks' times treat any offset in it as possible (findings.py: a
lag smaller than that uncertainty does not make a straggler).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from overlapscope.arrays import FloatArray, IntArray

# The soft range of the end differences: from this percentile to its complement (the middle
# 90%: one thread descheduled after a transfer does not widen it).
END_RANGE_PCT = 5.0


def causal_bounds(
    starts: FloatArray,
    ends: FloatArray,
    ref: int,
    pairs: tuple[IntArray, IntArray, FloatArray] | None = None,
) -> tuple[FloatArray, FloatArray]:
    """``(lo, hi)`` per column (rank) of ``o_rank - o_ref``: ``starts``/``ends`` are
    (collective x rank) matrices, NaN where a rank lacks a collective; ``ref`` the reference
    column; ``pairs``: ``(recv, send, c)``, each ``o_recv - o_send <= c`` (send/receive
    pairs, by column). Unbounded sides are +-inf."""
    n = starts.shape[1]
    hi = np.full(n, np.inf)
    lo = np.full(n, -np.inf)
    hi[ref] = lo[ref] = 0.0
    has = ~np.isnan(starts) & ~np.isnan(ends)
    s = np.where(has, starts, np.nan)
    e = np.where(has, ends, np.nan)
    for _ in range(max(n, 1)):
        new_hi, new_lo = _relax(s, e, has, hi, lo, pairs)
        if np.array_equal(new_hi, hi) and np.array_equal(new_lo, lo):
            break
        hi, lo = new_hi, new_lo
    return lo, hi


def _relax(
    s: FloatArray,
    e: FloatArray,
    has: npt.NDArray[np.bool_],
    hi: FloatArray,
    lo: FloatArray,
    pairs: tuple[IntArray, IntArray, FloatArray] | None,
) -> tuple[FloatArray, FloatArray]:
    """One round: each rank's bounds through every collective it shares with a bounded rank
    (o_i <= o_j + e_i - s_j, o_i >= o_j + s_i - e_j), and through every send/receive pair."""
    with np.errstate(invalid="ignore"):
        # min_j (hi_j - s_j), max_j (lo_j - e_j) per collective, then through it per rank
        reach = np.where(has, hi[None, :] - s, np.inf).min(axis=1, initial=np.inf)
        back = np.where(has, lo[None, :] - e, -np.inf).max(axis=1, initial=-np.inf)
        up = np.where(has, e + reach[:, None], np.inf).min(axis=0, initial=np.inf)
        down = np.where(has, s + back[:, None], -np.inf).max(axis=0, initial=-np.inf)
    new_hi, new_lo = np.minimum(hi, up), np.maximum(lo, down)
    if pairs is not None and len(pairs[0]):
        recv, send, c = pairs
        np.minimum.at(new_hi, recv, new_hi[send] + c)  # o_recv <= o_send + c
        np.maximum.at(new_lo, send, new_lo[recv] - c)  # o_send >= o_recv - c
    return new_hi, new_lo


def plausible(lo: float, hi: float, point: float, diffs: FloatArray) -> tuple[float, float]:
    """The causal interval ``[lo, hi]`` cut to the middle 90% of the end differences
    ``diffs`` (the soft evidence), never empty: the point estimate (inside ``[lo, hi]``)
    stays in it."""
    if not len(diffs):
        return lo, hi
    low, high = np.percentile(diffs, [END_RANGE_PCT, 100.0 - END_RANGE_PCT])
    a, b = max(lo, float(low)), min(hi, float(high))
    return min(a, point), max(b, point)


def uncertainty(lo: float, hi: float, applied: float) -> float:
    """How far the true offset may be from the one applied (0 when the clock is kept): to
    the farther end of its plausible interval."""
    return max(applied - lo, hi - applied, 0.0)
