"""The what-if memory model: the measured memory curve, re-stacked under another schedule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from overlapscope.config import Policy
from overlapscope.phases import Phase
from overlapscope.sim import load_calibration, predict_from
from overlapscope.sim.memory import predicted_peak, window_peaks
from overlapscope.sim.schedule import Scenario, StepModel, build_program
from overlapscope.trace.run.loader import load_run

SAMPLES = Path(__file__).resolve().parents[2] / "traces"
MB = 1 << 20
EARLY = (Phase.BWD, "blocks.1", 0)
LATE = (Phase.BWD, "blocks.0", 0)


def test_restacking_moves_the_peak_to_the_new_highest_window() -> None:
    # Measured (no prefetch): one unit alive in both windows; the peak is late in backward,
    # when most activations are freed. Prefetching adds a unit early, where memory was
    # 3 MB lower: the new peak is 1 MB above the old one, not a whole 4 MB unit.
    measured = {EARLY: 20 * MB, LATE: 23 * MB}
    peak = predicted_peak(
        23 * MB, measured, [(EARLY, 1), (LATE, 1)], [(EARLY, 2), (LATE, 1)], unit_bytes=4 * MB
    )
    assert peak == 24 * MB
    # the same schedule gives back the measured peak
    assert (
        predicted_peak(23 * MB, measured, [(EARLY, 1), (LATE, 1)], [(EARLY, 1), (LATE, 1)], 4 * MB)
        == 23 * MB
    )


def test_windows_that_do_not_match_the_program_fall_back() -> None:
    other = [((Phase.FWD, f"u{i}", 0), 1) for i in range(6)]
    assert predicted_peak(10, {EARLY: 10}, [(EARLY, 1)], other, unit_bytes=4) is None


def test_program_windows_follow_the_policy() -> None:
    model = StepModel(("a", "b"), {"root": 0, "a": 4, "b": 4}, {"root": 0, "a": 4, "b": 4})
    none = dict(build_program(model, Scenario(Policy.NONE)).window_units)
    pre = dict(build_program(model, Scenario(Policy.BACKWARD_PRE)).window_units)
    assert none[(Phase.BWD, "b", 0)] == 1
    assert pre[(Phase.BWD, "b", 0)] == 2  # a's all-gather issued before b's gradient compute
    assert pre[(Phase.BWD, "a", 0)] == 1  # nothing left to prefetch


@pytest.mark.parametrize("config", ["none", "backward_pre"])
def test_window_peaks_of_a_sample_cover_its_peak(config: str) -> None:
    run = SAMPLES / config
    traces = load_run(run)
    ev, mem = traces.events, traces.memory
    peaks = window_peaks(ev[ev["rank"] == 0], mem[mem["rank"] == 0])
    assert peaks, "no compute windows with memory events"
    measured = json.loads((run / "run.json").read_text())["peak_mem_bytes"][0]
    assert max(peaks.values()) == measured


def test_samples_predict_each_other_exactly() -> None:
    # backward_pre's measured peak is 0.39 of a unit above none's: the prefetched unit
    # lands in an earlier window than none's peak
    none = load_calibration(SAMPLES / "none")
    pre = json.loads((SAMPLES / "backward_pre" / "run.json").read_text())["peak_mem_bytes"]
    assert predict_from(none, Scenario(Policy.BACKWARD_PRE)).peak_mem_bytes == max(pre)
    assert predict_from(none, none.measured.scenario).peak_mem_bytes == none.measured.peak_mem_bytes
