"""Clock offsets bounded by causality (issue 30 point 6): known answers on small matrices, the
bound carried through a third rank, send/receive pairs, and the estimate inside its
bounds on an event table with all-to-alls and sends."""

from __future__ import annotations

import numpy as np
import pytest

from overlapscope.analysis.clocks.alignment import estimate_offsets
from overlapscope.analysis.clocks.bounds import causal_bounds, plausible, uncertainty
from tests.clocks.conftest import table

NAN = float("nan")


def test_one_collective_bounds_the_offset_by_its_ends_and_starts() -> None:
    """Rank 1 started at 10 and ended at 30; rank 0 started at 0 and ended at 30 (one
    clock). o1 - o0 <= end1 - start0 = 30; o1 - o0 >= start1 - end0 = -20."""
    starts = np.asarray([[0.0, 10.0]])
    ends = np.asarray([[30.0, 30.0]])
    lo, hi = causal_bounds(starts, ends, ref=0)
    assert (lo.tolist(), hi.tolist()) == ([0.0, -20.0], [0.0, 30.0])


def test_a_rank_bounded_only_through_another_gets_its_bounds() -> None:
    """Rank 2 never meets rank 0, only rank 1; its bounds come through rank 1's."""
    starts = np.asarray([[0.0, 5.0, NAN], [NAN, 100.0, 104.0]])
    ends = np.asarray([[20.0, 20.0, NAN], [NAN, 110.0, 110.0]])
    lo, hi = causal_bounds(starts, ends, ref=0)
    # o1 in [5 - 20, 20 - 0] = [-15, 20]; o2 - o1 in [104 - 110, 110 - 100] = [-6, 10]
    assert lo.tolist() == [0.0, -15.0, -21.0]
    assert hi.tolist() == [0.0, 20.0, 30.0]


def test_send_receive_pairs_bound_the_receiver() -> None:
    """No receive ends before its send started: o_recv - o_send <= end_recv - start_send."""
    starts = np.full((0, 2), NAN)
    ends = np.full((0, 2), NAN)
    pairs = (np.asarray([1]), np.asarray([0]), np.asarray([12.0]))
    lo, hi = causal_bounds(starts, ends, ref=0, pairs=pairs)
    assert (lo[1], hi[1]) == (-np.inf, 12.0)
    back = (np.asarray([0]), np.asarray([1]), np.asarray([7.0]))  # rank 0 received from 1
    lo, hi = causal_bounds(starts, ends, ref=0, pairs=back)
    assert (lo[1], hi[1]) == (-7.0, np.inf)


def test_plausible_and_uncertainty() -> None:
    assert plausible(-20.0, 30.0, 2.0, np.arange(-5.0, 6.0)) == (-4.5, 4.5)
    assert plausible(-20.0, 30.0, 2.0, np.zeros(0)) == (-20.0, 30.0)
    assert uncertainty(-4.5, 4.5, 2.0) == 6.5
    assert uncertainty(-4.5, 4.5, 0.0) == 4.5


def _run(shift: float) -> list[dict[str, object]]:
    """Two ranks, six all-to-alls (rank 1 a little late in three, rank 0 in three) and a
    send 0 -> 1, rank 1's clock ``shift`` µs ahead."""
    rows: list[dict[str, object]] = []
    for seq in range(6):
        t = 1000.0 * seq
        late = 1 if seq % 2 else 0
        for rank in (0, 1):
            start = t + (30.0 if rank == late else 0.0)
            rows.append(
                {"rank": rank, "lane": "comm", "ts": start + (shift if rank else 0.0),
                 "dur": t + 100.0 - start, "kind": "all_to_all", "group": "g", "seq": seq}
            )  # fmt: skip
    rows.append({"rank": 0, "lane": "comm", "ts": 7000.0, "dur": 10.0, "kind": "send",
                 "group": "p", "seq": 0})  # fmt: skip
    rows.append({"rank": 1, "lane": "comm", "ts": 7005.0 + shift, "dur": 20.0, "kind": "recv",
                 "group": "p", "seq": 0})  # fmt: skip
    return rows


@pytest.mark.parametrize("shift", [0.0, 5000.0, -250.0])
def test_all_to_all_and_sends_count_and_the_estimate_lies_inside(shift: float) -> None:
    off = estimate_offsets(table(_run(shift))).set_index("rank").loc[1]
    assert off["aligned"] and off["num_collectives"] == 6
    # ends equal on one clock: the estimate is the shift itself
    assert off["offset_us"] == pytest.approx(shift)
    # all-to-alls: o1 >= shift - 70 (rank 1 started 30 µs late, 70 before the end) and
    # <= shift + 70; the send (7000) and its receive (ends 7025): o1 <= shift + 25
    assert off["lo_us"] == pytest.approx(shift - 70.0)
    assert off["hi_us"] == pytest.approx(shift + 25.0)
    assert off["lo_us"] <= off["offset_us"] <= off["hi_us"]
