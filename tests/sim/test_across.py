"""Runs of one workload calibrate together (``whatif --contention-from``,
overlapscope/sim/across.py): the compute slow-down α, and the machine's compute speed, the
source's compute scaled to the runs' median forward compute at its link rate. Known answers
on the bundled samples (traces/: one workload at 0.5 Gbit/s), slowed copies standing for runs
of a slower machine."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from overlapscope.config import Policy
from overlapscope.sim import Calibration, Scenario, load_calibration, predict_from
from overlapscope.sim.across import forward_us, pool_runs
from tests.conftest import overlapscope_cmd

SAMPLES = Path(__file__).resolve().parents[2] / "traces"


@pytest.fixture(scope="module")
def none() -> Calibration:
    return load_calibration(SAMPLES / "none")


def slowed(c: Calibration, k: float, link_gbit: float | None = None) -> Calibration:
    """The run as measured on a machine ``k`` times slower (every compute range ``k`` times
    longer), optionally at another link rate."""
    rows = c.compute_rows.assign(dur_us=c.compute_rows["dur_us"] * k)
    measured = dataclasses.replace(c.measured, link_gbit=link_gbit or c.measured.link_gbit)
    return dataclasses.replace(c, compute_rows=rows, measured=measured)


def test_the_source_takes_the_median_speed_of_the_runs(none: Calibration) -> None:
    pooled = pool_runs(none, [slowed(none, 1.25), slowed(none, 1.25)])
    assert pooled.num_runs == pooled.speed_runs == 3
    assert pooled.contention == 0.0  # the same busy fractions in every run: α cannot be told
    assert pooled.speed_scale == pytest.approx(1.25)
    assert forward_us(slowed(none, 1.25), 0.0) == pytest.approx(1.25 * forward_us(none, 0.0))
    # the replay computes 1.25 times longer; the wire is unchanged
    scenario = Scenario(Policy.BACKWARD_PRE)
    own = predict_from(none, scenario, contention=0.0)
    fast = predict_from(none, scenario, contention=0.0, speed_scale=pooled.speed_scale)
    assert fast.speed_scale == pooled.speed_scale
    assert fast.per_rank["compute_us"].to_numpy() == pytest.approx(
        1.25 * own.per_rank["compute_us"].to_numpy()
    )
    for a, b in zip(fast.replays, own.replays, strict=True):
        wire = [e - s for s, e in zip(a.coll_start_us, a.coll_end_us, strict=True)]
        assert wire == pytest.approx(
            [e - s for s, e in zip(b.coll_start_us, b.coll_end_us, strict=True)]
        )
    assert fast.step_time_us > own.step_time_us


def test_runs_at_another_link_rate_set_only_the_forward_speed_there(none: Calibration) -> None:
    # compute after the long waits of a slower link is slower on some machines, not the
    # machine at large: runs at another rate tell the forward compute there, nothing else
    slow = slowed(none, 2.0, link_gbit=0.25)
    pooled = pool_runs(none, [slow])
    assert (pooled.num_runs, pooled.speed_scale, pooled.forward_scale) == (1, 1.0, 1.0)
    assert pooled.unused == (0,)  # named by the CLI, not dropped silently
    there = Scenario(Policy.NONE, link_gbit=0.25)
    pooled = pool_runs(none, [slow], there)
    assert pooled.speed_scale == 1.0
    assert (pooled.forward_runs, pooled.forward_scale) == (1, pytest.approx(2.0))
    assert pooled.unused == ()
    # another forward prefetch waits otherwise in forward: not used
    fwd_prefetch = dataclasses.replace(there, forward_prefetch=True)
    pooled_fp = pool_runs(none, [slow], fwd_prefetch)
    assert (pooled_fp.forward_runs, pooled_fp.unused) == (0, (0,))
    # the replay: forward compute twice as long, backward as it was
    own = predict_from(none, there, contention=0.0)
    pred = predict_from(none, there, contention=0.0, forward_scale=pooled.forward_scale)
    for phase in ("fwd", "bwd"):
        got = [
            iv.dur_us
            for r in pred.replays
            for iv in r.intervals
            if iv.lane == "compute" and iv.phase == phase
        ]
        was = [
            iv.dur_us
            for r in own.replays
            for iv in r.intervals
            if iv.lane == "compute" and iv.phase == phase
        ]
        assert got == pytest.approx([w * (2.0 if phase == "fwd" else 1.0) for w in was])


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(overlapscope_cmd(*args), capture_output=True, text=True, timeout=300)


def at_rate(tmp_path: Path, config: str, link_gbit: float) -> Path:
    """A copy of a sample whose run.json names another link rate."""
    run = tmp_path / f"{config}@{link_gbit}"
    shutil.copytree(SAMPLES / config, run)
    meta = json.loads((run / "run.json").read_text())
    meta["config"]["link_gbit"] = link_gbit
    (run / "run.json").write_text(json.dumps(meta))
    return run


def run_cli(tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "pred.json"
    proc = cli("whatif", str(SAMPLES / "none"), "--policy", "backward_pre", *flags,
               "--json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(out.read_text())["calibration"]


def test_cli_calibrates_across_the_runs(tmp_path: Path) -> None:
    other = at_rate(tmp_path, "backward_pre", 1.0)
    runs = [str(SAMPLES / "backward_post"), str(SAMPLES / "backward_pre+limit=2"), str(other)]
    proc, calib = run_cli(tmp_path, "--contention-from", *runs)
    # at the run's own rate the run at 1 Gbit/s is of no use: named in one line, left out
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "1 run(s) at neither 0.5 Gbit/s" in proc.stderr and str(other) in proc.stderr
    assert "contention fitted across 3 runs" in proc.stdout
    assert "compute speed: x" in proc.stdout and "forward compute at" not in proc.stdout
    src = load_calibration(SAMPLES / "none")
    same = [load_calibration(Path(r)) for r in runs[:2]]
    pooled = pool_runs(src, same)
    assert calib["compute_speed_scale"] == pytest.approx(pooled.speed_scale)
    assert calib["contention"] == pytest.approx(pooled.contention)
    assert calib["forward_speed_scale"] == 1.0
    # predicting at 1 Gbit/s, the run there sets the forward speed: no warning
    proc, calib = run_cli(tmp_path, "--contention-from", *runs, "--link-gbit", "1")
    assert proc.stderr == ""
    assert "forward compute at 1.0 Gbit/s: x" in proc.stdout
    there = [load_calibration(other)]
    scenario = Scenario(Policy.BACKWARD_PRE, link_gbit=1.0)
    pooled = pool_runs(src, [*same, *there], scenario)
    assert pooled.forward_runs == 1
    assert calib["forward_speed_scale"] == pytest.approx(pooled.forward_scale)
    assert calib["compute_speed_scale"] == pytest.approx(pooled.speed_scale)


def test_cli_refuses_runs_only_at_another_rate(tmp_path: Path) -> None:
    other = at_rate(tmp_path, "backward_pre", 1.0)
    proc = cli("whatif", str(SAMPLES / "none"), "--policy", "backward_pre",
               "--contention-from", str(other))  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "--contention-from: no run at" in lines[0] and "0.5 Gbit/s" in lines[0]
