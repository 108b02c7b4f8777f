"""The bundled sample runs (traces/: one workload at 0.5 Gbit/s, one run per policy) predict
each other. The samples are fixed files, so these figures are deterministic; the full table
is in docs/WHATIF.md (``python benchmarks/whatif_samples_table.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from overlapscope.config import Policy
from overlapscope.sim import Scenario, load_calibration, predict_from

SAMPLES = Path(__file__).resolve().parents[2] / "traces"
CONFIGS = ["none", "backward_post", "backward_pre", "backward_pre+limit=2"]


def test_none_predicts_backward_pre_within_10_percent() -> None:
    source = load_calibration(SAMPLES / "none")
    target = load_calibration(SAMPLES / "backward_pre").measured
    pred = predict_from(source, Scenario(Policy.BACKWARD_PRE))
    err = abs(pred.step_time_us - target.step_time_us) / target.step_time_us
    assert err <= 0.10, (pred.step_time_us, target.step_time_us)
    assert pred.peak_mem_bytes == target.peak_mem_bytes


@pytest.mark.parametrize("config", CONFIGS)
def test_each_sample_replays_its_own_step_within_5_percent(config: str) -> None:
    calib = load_calibration(SAMPLES / config)
    pred = predict_from(calib, calib.measured.scenario)
    err = abs(pred.step_time_us - calib.measured.step_time_us) / calib.measured.step_time_us
    assert err <= 0.05, (pred.step_time_us, calib.measured.step_time_us)
