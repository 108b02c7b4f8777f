"""A real small run (2 gloo ranks, tiny GPT): self-replay accuracy and the whatif CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from overlapscope.errors import UserError
from overlapscope.lab.netns import check_lab_available
from overlapscope.sim import Policy, Scenario, load_calibration, predict_from
from overlapscope.trace.loader import load_run
from tests.conftest import overlapscope_cmd

LAYERS = 2
SMALL = [
    "--layers", str(LAYERS), "--dim", "256", "--heads", "2", "--seq-len", "128", "--global-batch", "8",
    "--steps", "6", "--profile-wait", "1", "--profile-warmup", "1", "--profile-active", "4",
]  # fmt: skip

pytestmark = pytest.mark.multirank


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(overlapscope_cmd(*args), capture_output=True, text=True, timeout=300)


def network_flags() -> list[str]:
    """A shaped 1 Gbit/s link where the lab can run (as in the validation sweeps); plain
    loopback otherwise, where gloo's transfers compete with compute for the cores and vary
    several-fold from op to op."""
    try:
        check_lab_available()
    except UserError:
        return []
    return ["--link-gbit", "1"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("whatif") / "run"
    args = ("run", "--policy", "backward_post", *SMALL, *network_flags(), "--out", str(out))
    proc = cli(*args)
    assert proc.returncode == 0, proc.stderr
    return out


def test_self_replay_reproduces_measured_step_time(measured: Path) -> None:
    calib = load_calibration(measured)
    pred = predict_from(calib, calib.measured.scenario)
    err = abs(pred.step_time_us - calib.measured.step_time_us) / calib.measured.step_time_us
    assert err <= 0.05, (pred.step_time_us, calib.measured.step_time_us)
    assert pred.peak_mem_bytes == calib.measured.peak_mem_bytes  # same alive units


def test_prefetch_policy_changes_alive_units(measured: Path) -> None:
    calib = load_calibration(measured)
    pre = predict_from(calib, Scenario(Policy.BACKWARD_PRE))
    assert pre.max_alive_in_backward == 2
    assert pre.peak_mem_bytes == calib.measured.peak_mem_bytes + calib.alive_unit_bytes
    slow = predict_from(calib, Scenario(Policy.BACKWARD_POST, bandwidth_scale=0.1))
    assert slow.step_time_us > calib.measured.step_time_us


def test_cli_json_and_trace(measured: Path, tmp_path: Path) -> None:
    trace = tmp_path / "pred"
    proc = cli(
        "whatif", str(measured), "--policy", "backward_pre", "--bandwidth-scale", "0.5",
        "--json", "-", "--trace", str(trace),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    for key in ("step_time_us", "exposed_comm_us", "nccl_wait_us", "peak_mem_bytes"):
        assert doc[key] > 0, key
    assert doc["scenario"]["policy"] == "backward_pre"
    assert doc["measured_source"]["scenario"] == "backward_post"
    run = load_run(trace, progress=False)
    assert run.world_size == 2 and run.run_meta is not None
    assert run.run_meta["predicted"]["scenario"] == "backward_pre@bw×0.5"
    assert run.run_meta["config"]["engine"]["policy"] == "backward_pre"
    from overlapscope.analysis import analyze

    a = analyze(run)
    step = float(a.ranks["mean_step_time_us"].mean())
    assert step == pytest.approx(doc["step_time_us"], rel=0.01)
    per_step = (1 + LAYERS) + LAYERS + (LAYERS + 1)  # AG fwd (root + units), AG bwd, RS
    assert len(a.collectives) == per_step * len(run.run_meta["profiled_steps"])
    # A prediction is not a calibration source: one line, naming the run.
    again = cli("whatif", str(trace), "--policy", "none")
    assert again.returncode == 2
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1 and "what-if prediction" in lines[0] and str(trace) in lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--policy", "sometimes"], "invalid choice"),
        (["--policy", "none", "--limit-all-gathers", "0"], "--limit-all-gathers"),
        (["--policy", "none", "--bandwidth-scale", "-1"], "--bandwidth-scale"),
        (["--policy", "none", "--link-gbit", "1", "--bandwidth-scale", "2"], "not allowed"),
    ],
)
def test_cli_bad_flags_one_line(measured: Path, args: list[str], needle: str) -> None:
    proc = cli("whatif", str(measured), *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_cli_not_a_run(tmp_path: Path) -> None:
    proc = cli("whatif", str(tmp_path), "--policy", "none")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no run.json" in lines[0], proc.stderr
