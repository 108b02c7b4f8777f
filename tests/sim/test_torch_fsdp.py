"""What-if from real torch FSDP1 / FSDP2 traces (2 gloo ranks, no run.json, no ovs/ ranges).

On CPU torch's collectives block their thread, so a prefetch policy hides nothing there:
what holds on any machine is checked here (the schedule the run had is found from its
collective order, compute is conserved by the attribution, the CLI answers); cross-policy
accuracy needs a GPU, and self-replay figures are speed figures (docs/WHATIF.md)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from overlapscope.analysis import analyze
from overlapscope.config import Policy
from overlapscope.sim import Scenario, load_calibration, predict_from
from overlapscope.sim.facts import torch_facts
from overlapscope.sim.inputs import sim_inputs
from overlapscope.sim.schedule import build_program
from overlapscope.sim.torch_fsdp import attribute_compute
from overlapscope.trace.run.loader import load_run
from tests.conftest import overlapscope_cmd

pytestmark = pytest.mark.multirank
KINDS = ["fsdp1", "fsdp2"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_runs_schedule_is_backward_pre(torch_fsdp_runs: dict[str, Path], kind: str) -> None:
    # FSDP1 with BackwardPrefetch.BACKWARD_PRE and FSDP2's default implicit prefetch issue
    # the next unit's all-gather before the current unit's gradient compute, as the
    # engine's backward_pre does: AG2, AG1, RS2, AG0, RS1, RS0 in backward
    calib = load_calibration(torch_fsdp_runs[kind])
    assert calib.framework == kind
    assert calib.measured.scenario == Scenario(Policy.BACKWARD_PRE)
    assert len(calib.step_model.units) == 3 and calib.step_model.blocking
    order = [(c.phase.value, c.unit) for c in build_program(calib.step_model, calib.measured.scenario).collectives]  # fmt: skip
    u0, u1, u2 = calib.step_model.units
    assert order[3:] == [("ag_bwd", u2), ("ag_bwd", u1), ("rs", u2), ("ag_bwd", u0), ("rs", u1), ("rs", u0)]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_attributed_compute_adds_up_to_the_steps_compute(
    torch_fsdp_runs: dict[str, Path], kind: str
) -> None:
    traces = load_run(torch_fsdp_runs[kind], progress=False)
    a = analyze(traces)
    coll = a.collectives.assign(
        unit=a.collectives["unit"].astype(str), phase=a.collectives["phase"].astype(str)
    )
    facts = torch_facts(a, coll)
    steps = a.steps[a.steps["step"] >= 0]
    comp = attribute_compute(a.timeline, steps, build_program(facts.model, facts.scenario))
    per_step = comp.groupby(["rank", "step"])["dur_us"].sum()
    measured = steps.set_index(["rank", "step"])["compute_us"]
    assert per_step.to_numpy() == pytest.approx(measured.loc[per_step.index].to_numpy())
    assert not sim_inputs(traces).mem_windows  # no ovs/ ranges: the memory model stays off


@pytest.mark.parametrize("kind", KINDS)
def test_cli_predicts_from_a_torch_trace_dir(torch_fsdp_runs: dict[str, Path], kind: str) -> None:
    run = torch_fsdp_runs[kind]
    proc = subprocess.run(
        overlapscope_cmd("whatif", str(run), "--policy", "none", "--link-gbit", "0.1", "--json", "-"),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["source_framework"] == kind
    assert doc["measured_source"]["scenario"] == "backward_pre"
    assert doc["step_time_per_step_us"] > 0 and doc["peak_mem_bytes"] is None
    calib = load_calibration(run)
    fast = predict_from(calib, Scenario(Policy.NONE))
    slow = predict_from(calib, Scenario(Policy.NONE, bandwidth_scale=0.1))
    assert slow.step_time_us > fast.step_time_us  # blocking transfers: all of it shows


def test_the_whatif_tab_predicts_from_a_torch_run(torch_fsdp_runs: dict[str, Path]) -> None:
    from dashboards import ids, views
    from dashboards.data import RunRegistry, discover_runs

    registry = RunRegistry(discover_runs(list(torch_fsdp_runs.values())), use_disk_cache=False)
    for src in registry.sources:
        # the source measured against itself: predicted vs measured with the error column
        out = views.whatif_view(registry, src.key, src.key, None, "none", (), "off", "scale", 0.5)
        text = str(out)
        assert ids.WHATIF_TABLE in text and "error" in text, src.label
        assert "the simulator failed" not in text and "Cannot" not in text, src.label
