import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from overlapscope.analysis import intervals
from overlapscope.analysis.intervals import (
    Intervals,
    clip,
    covered,
    gaps,
    intersect,
    split,
    subtract,
    union,
    union_of,
)


def pairs(iv: Intervals) -> list[tuple[float, float]]:
    return list(zip(iv.starts.tolist(), iv.ends.tolist(), strict=False))


def test_union_merges_overlapping_touching_and_nested():
    u = union([5, 0, 1, 10, 12, 20], [6, 2, 4, 12, 13, 20])
    assert pairs(u) == [(0, 4), (5, 6), (10, 13)]  # [20,20) is empty
    assert u.total == 8


def test_docstring_example():
    a = union([0, 6], [4, 8])
    b = union([2], [7])
    assert pairs(intersect(a, b)) == [(2, 4), (6, 7)]
    assert pairs(subtract(a, b)) == [(0, 2), (7, 8)]
    assert pairs(union_of(a, b)) == [(0, 8)]


@pytest.mark.parametrize(
    ("starts", "ends", "qs", "qe", "want"),
    [
        ([0, 10], [5, 20], [0, 3, 4, 25, 8], [30, 12, 6, 30, 9], [15, 4, 1, 0, 0]),
        ([], [], [0], [10], [0]),
    ],
    ids=["mixed", "empty-set"],
)
def test_covered_known_answers(starts, ends, qs, qe, want):
    np.testing.assert_allclose(covered(union(starts, ends), qs, qe), want)


def test_gaps_and_clip():
    a = union([1, 5], [2, 7])
    assert pairs(gaps(a, 0, 10)) == [(0, 1), (2, 5), (7, 10)]
    assert pairs(clip(a, 1.5, 6)) == [(1.5, 2), (5, 6)]
    assert pairs(subtract(a, Intervals.empty())) == pairs(a)
    assert len(intersect(a, Intervals.empty())) == 0


ivs = st.lists(
    st.tuples(st.integers(0, 50), st.integers(0, 10)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=12,
)


def mask(iv_list: list[tuple[int, int]]) -> np.ndarray:
    m = np.zeros(70, dtype=bool)
    for s, e in iv_list:
        m[s:e] = True
    return m


@settings(max_examples=150, deadline=None)
@given(ivs, ivs)
def test_set_ops_match_a_brute_force_grid(a_list, b_list):
    a = union([s for s, _ in a_list], [e for _, e in a_list])
    b = union([s for s, _ in b_list], [e for _, e in b_list])
    ma, mb = mask(a_list), mask(b_list)
    assert a.total == ma.sum()
    assert intersect(a, b).total == (ma & mb).sum()
    assert subtract(a, b).total == (ma & ~mb).sum()
    assert union_of(a, b).total == (ma | mb).sum()
    got = covered(a, [s for s, _ in b_list], [e for _, e in b_list])
    want = [ma[s:e].sum() for s, e in b_list]
    np.testing.assert_allclose(got, want)


@settings(max_examples=150, deadline=None)
@given(ivs, ivs, st.floats(0, 1))
def test_split_is_subtract_and_intersect(a_list, b_list, shift):
    a = union([s + shift for s, _ in a_list], [e for _, e in a_list])
    b = union([s for s, _ in b_list], [e - shift for _, e in b_list])
    rest, common = split(a, b)
    for got, want in ((rest, subtract(a, b)), (common, intersect(a, b))):
        np.testing.assert_array_equal(got.starts, want.starts)
        np.testing.assert_array_equal(got.ends, want.ends)


@settings(max_examples=150, deadline=None)
@given(ivs, st.integers(0, 60), st.integers(0, 60))
def test_clip_matches_a_brute_force_grid(a_list, lo, hi):
    a = union([s for s, _ in a_list], [e for _, e in a_list])
    window = np.zeros(70, dtype=bool)
    window[lo:hi] = True
    c = clip(a, lo, hi)
    assert c.total == (mask(a_list) & window).sum()
    assert (np.diff(c.starts) > 0).all() and (c.ends > c.starts).all()


# --- the former segment ops (reference): every endpoint a cut, the result through union() ---


def _former_combine(a: Intervals, b: Intervals, keep_a: bool, keep_b: bool, both: bool):
    cuts = np.unique(np.concatenate([a.starts, a.ends, b.starts, b.ends]))
    lo, hi = cuts[:-1], cuts[1:]
    mid = lo + (hi - lo) / 2
    in_a, in_b = intervals._inside(a, mid), intervals._inside(b, mid)
    if len(lo) < 1:
        return Intervals.empty()
    sel = (in_a & in_b & both) | (in_a & ~in_b & keep_a) | (~in_a & in_b & keep_b)
    return union(lo[sel], hi[sel])


def _near(values: list[float], ulps: list[int]) -> list[float]:
    """Float endpoints a few ulps apart (segments of one ulp, whose midpoint rounds)."""
    base = 1.7e9 + np.asarray(values, dtype=np.float64) * 1e-3
    return (base + np.asarray(ulps) * np.spacing(base)).tolist()


float_ivs = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 6), st.integers(-2, 2), st.integers(-2, 2)),
    max_size=12,
)


def _float_set(rows: list[tuple[int, int, int, int]]) -> Intervals:
    starts = _near([s for s, _, _, _ in rows], [u for _, _, u, _ in rows])
    ends = _near([s + n for s, n, _, _ in rows], [u for _, _, _, u in rows])
    return union(starts, ends)


@settings(max_examples=400, deadline=None)
@given(float_ivs, float_ivs)
def test_segment_ops_equal_the_former_ones(a_rows, b_rows):
    """The ops merge their sorted segments without sorting them again: the same arrays,
    floats one ulp apart included."""
    a, b = _float_set(a_rows), _float_set(b_rows)
    window = union([1.7e9], [1.7e9 + 0.05])
    rest, common = split(a, b)
    got = [intersect(a, b), subtract(a, b), rest, common, gaps(a, 1.7e9, 1.7e9 + 0.05)]
    want = [_former_combine(a, b, False, False, True), _former_combine(a, b, True, False, False)]
    want += [want[1], want[0], _former_combine(window, a, True, False, False)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.starts, w.starts)
        np.testing.assert_array_equal(g.ends, w.ends)


def test_complement_is_gaps() -> None:
    """complement() reads the gaps off the sorted set; it equals gaps() (the set difference
    of the bounds and the set) on random sets and bounds (NaN and empty bounds included)."""
    import numpy as np

    from overlapscope.analysis.intervals import complement, subtract, union

    rng = np.random.default_rng(0)
    for _ in range(2000):
        n = int(rng.integers(0, 30))
        s = rng.integers(0, 100, n).astype(float)
        a = union(s, s + rng.integers(0, 10, n))
        lo, hi = rng.integers(-5, 110, 2).astype(float)
        got, want = complement(a, lo, hi), subtract(union([lo], [hi]), a)
        assert np.array_equal(got.starts, want.starts) and np.array_equal(got.ends, want.ends)
    assert len(complement(union([1.0], [2.0]), float("nan"), 5.0)) == 0
