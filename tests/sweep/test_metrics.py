"""Summary over repeats: medians, spread and config order, on a tiny hand-made table."""

from __future__ import annotations

import pandas as pd
import pytest

from overlapscope.sweep import SUMMARY_COLUMNS, parse_points, points_table, summarize


def test_summarize_medians_spread_and_order() -> None:
    points = parse_points("backward_pre,none")
    runs = pd.DataFrame(
        {
            "config": ["none", "backward_pre", "none", "backward_pre", "none", "backward_pre"],
            "repeat": [0, 0, 1, 1, 2, 2],
            "step_time_per_step_ms": [100.0, 80.0, 110.0, 90.0, 90.0, 70.0],
            "throughput_samples_s": [80.0, 100.0, 72.0, 88.0, 88.0, 114.0],
            "exposed_comm_per_step_ms": [30.0, 10.0, 31.0, 11.0, 29.0, 9.0],
            "nccl_wait_per_step_ms": [28.0, 9.0, 29.0, 10.0, 27.0, 8.0],
            "overlap_pct": [10.0, 60.0, 11.0, 61.0, 9.0, 59.0],
            "peak_mem_mib": [50.0, 60.0, 50.0, 60.0, 50.0, 60.0],
        }
    )
    s = summarize(runs, points_table(points))
    assert list(s.columns) == SUMMARY_COLUMNS
    assert list(s["config"]) == ["backward_pre", "none"]  # --policies order
    none = s.set_index("config").loc["none"]
    assert none["repeats"] == 3
    assert none["step_time_per_step_ms"] == 100.0
    assert (none["step_time_per_step_min_ms"], none["step_time_per_step_max_ms"]) == (90.0, 110.0)
    assert none["step_time_spread_pct"] == pytest.approx(20.0)
    assert none["exposed_comm_per_step_ms"] == 30.0 and none["overlap_pct"] == 10.0
    assert s.set_index("config").loc["backward_pre", "peak_mem_mib"] == 60.0
