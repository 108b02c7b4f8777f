"""The what-if link calibration: how long a collective holds the queue, and the link fit (a
latency only where the message sizes can tell one)."""

from __future__ import annotations

import pandas as pd
import pytest

from overlapscope.analysis.collectives.tables import collective_tables
from overlapscope.analysis.waiting.comm_causes import PART_COLUMNS
from overlapscope.sim.contention import fit_contention
from overlapscope.sim.link import fit_link, lane_time_us
from overlapscope.sim.rescale import rescale_lane_time


def _rows(pairs: list[tuple[int, float]]) -> pd.DataFrame:
    return pd.DataFrame(pairs, columns=["bytes", "transfer_us"])


def test_two_close_sizes_fit_through_the_origin() -> None:
    # 2.2 and 3.2 MB at ~1 Gbit/s with a little noise: a free line through these points has
    # a 4 ms intercept and twice the bandwidth, which scaling to another rate would multiply.
    rows = _rows([(2_230_272, 8_800.0), (2_230_272, 9_000.0), (3_159_040, 11_000.0)] * 3)
    link = fit_link("all_gather", rows, world_size=2)
    assert link.latency_us == 0.0
    total = rows["transfer_us"].sum()
    predicted = sum(link.transfer_us(int(b)) for b in rows["bytes"])
    assert predicted == pytest.approx(total)  # keeps the measured total


def test_sizes_spanning_4x_recover_a_known_latency() -> None:
    latency_us, bytes_per_us = 500.0, 125.0  # 1 Gbit/s
    sizes = [256 << 10, 1 << 20, 4 << 20, 16 << 20]
    rows = _rows([(s, latency_us + s * 0.5 / bytes_per_us) for s in sizes])
    link = fit_link("all_gather", rows, world_size=2)
    assert link.latency_us == pytest.approx(latency_us)
    assert link.busbw_bytes_per_us == pytest.approx(bytes_per_us)


def test_lane_time_runs_from_last_start_to_last_end() -> None:
    # Rank 0 issues at 0 and waits for rank 1 (starts at 5 ms); rank 1 is done at 13 ms but
    # rank 0 only at 20 ms, so the next collective on the queue cannot start before 20 ms.
    comm = pd.DataFrame(
        {
            "rank": [0, 1],
            "group": ["g", "g"],
            "step": [1, 1],
            "seq": [0, 0],
            "kind": ["all_gather"] * 2,
            "unit": ["blocks.0"] * 2,
            "phase": ["ag_fwd"] * 2,
            "bytes": [1 << 20] * 2,
            "ts_us": [0.0, 5_000.0],
            "dur_us": [20_000.0, 8_000.0],
            "end_us": [20_000.0, 13_000.0],
            "exposed_us": [0.0, 0.0],
            **{c: [0.0, 0.0] for c in PART_COLUMNS},
        }
    )
    coll, _ = collective_tables(comm, world_size=2)
    assert coll["transfer_us"].iloc[0] == pytest.approx(8_000.0)  # fastest rank (bandwidth)
    assert lane_time_us(coll).iloc[0] == pytest.approx(15_000.0)  # 5 ms -> 20 ms


def _compute(busy: list[float], dur_us: list[float]) -> pd.DataFrame:
    n = len(busy)
    return pd.DataFrame(
        {
            "unit": [f"blocks.{i % 4}" for i in range(n)],
            "phase": ["bwd"] * n,
            "dur_us": dur_us,
            "busy_frac": busy,
        }
    )


def test_contention_needs_busy_fractions_that_differ() -> None:
    sizes = {f"blocks.{i}": 1 << 20 for i in range(4)}
    # busy through every unit (backward_pre on a slow link): durations vary by noise only,
    # and the busy fractions by rounding; no slope can be told from that (here the noise
    # happens to follow the rounding: a free fit would read it as the 1.5 cap)
    flat = _compute([1.0, 1.0 - 1e-12, 1.0, 1.0 - 2e-12] * 2, [33e3, 30e3, 31e3, 29e3] * 2)
    assert fit_contention(flat, sizes) == 0.0
    # half the units overlap a transfer and run 1.2x slower: alpha = 0.2
    varied = _compute([0.0, 1.0] * 4, [30e3, 36e3] * 4)
    assert fit_contention(varied, sizes) == pytest.approx(0.2)


def test_rescaling_keeps_the_ranks_own_lag() -> None:
    # 20 ms on the queue: 1 ms latency, 15 ms on the wire, 4 ms of the ranks' own lag (the
    # last rank done after the first). On a link half as fast only the wire doubles.
    assert rescale_lane_time(20_000.0, 4_000.0, 1_000.0, 2.0) == pytest.approx(35_000.0)
    assert rescale_lane_time(20_000.0, 4_000.0, 1_000.0, 1.0) == pytest.approx(20_000.0)
