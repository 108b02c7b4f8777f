"""What changes when a prediction moves to another link rate: the wire part of each
collective and the part of its lag beyond the run's typical one scale with the rate; the
compute slow-down from communication follows the bytes moved per µs. Known answers on the
bundled ``traces/none`` run (measured at 0.5 Gbit/s)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from overlapscope.sim import Calibration, Scenario, load_calibration, predict_from
from overlapscope.sim.rescale import contention_under, scaled_links, transfer_us
from overlapscope.sim.schedule import build_program

SAMPLE = Path(__file__).resolve().parents[2] / "traces" / "none"


@pytest.fixture(scope="module")
def calib() -> Calibration:
    return load_calibration(SAMPLE)


def test_lag_beyond_the_runs_median_scales_with_the_wire(calib: Calibration) -> None:
    assert calib.measured.link_gbit == 0.5
    calib = dataclasses.replace(calib, lag_fixed_us=1_000.0)
    scenario = Scenario(calib.measured.scenario.policy, link_gbit=2.0)  # 4x the rate
    links = scaled_links(calib, scenario)
    coll = build_program(calib.step_model, scenario).collectives[0]
    key = (coll.unit, coll.phase)
    latency = calib.links[coll.kind].latency_us
    lane = {key: 41_000.0}
    # a lag of 5 ms: its first 1 ms (the run's median) is the ranks' own and stays; the
    # other 4 ms came with the 40 ms on the wire and shrink with it
    got = transfer_us(calib, links, coll, lane, {key: 5_000.0})
    assert got == pytest.approx(latency + 1_000.0 + (41_000.0 - latency - 1_000.0) / 4)
    # a lag within the median is kept whole
    got = transfer_us(calib, links, coll, lane, {key: 600.0})
    assert got == pytest.approx(latency + 600.0 + (41_000.0 - latency - 600.0) / 4)


def test_contention_follows_the_link_rate(calib: Calibration) -> None:
    calib = dataclasses.replace(calib, contention=0.1)
    same = Scenario(calib.measured.scenario.policy)
    faster = dataclasses.replace(same, link_gbit=1.0)  # twice the measured 0.5 Gbit/s
    assert contention_under(calib, scaled_links(calib, same)) == pytest.approx(0.1)
    assert contention_under(calib, scaled_links(calib, faster)) == pytest.approx(0.2)
    # and it is the α the replay used
    assert predict_from(calib, faster).contention == pytest.approx(0.2)
    slower = dataclasses.replace(same, bandwidth_scale=0.5)
    assert predict_from(calib, slower).contention == pytest.approx(0.05)
