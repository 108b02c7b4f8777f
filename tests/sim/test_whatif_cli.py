"""A real small run (2 gloo ranks, tiny GPT): the whatif CLI end to end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from overlapscope.config import Policy
from overlapscope.errors import UserError
from overlapscope.lab.netns import check_lab_available
from overlapscope.sim import Scenario, load_calibration, predict_from
from overlapscope.trace.run.loader import load_run
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


def test_self_replay_keeps_the_measured_peak(measured: Path) -> None:
    # (how close the replayed step time comes is a speed figure: docs/BENCHMARKS.md, and
    # test_samples.py on the bundled, fixed samples)
    calib = load_calibration(measured)
    pred = predict_from(calib, calib.measured.scenario)
    assert pred.peak_mem_bytes == calib.measured.peak_mem_bytes  # same alive units


def test_prefetch_policy_changes_alive_units(measured: Path) -> None:
    calib = load_calibration(measured)
    pre = predict_from(calib, Scenario(Policy.BACKWARD_PRE))
    assert pre.max_alive_in_backward == 2
    assert pre.peak_mem_bytes == calib.measured.peak_mem_bytes + calib.alive_unit_bytes
    same = predict_from(calib, Scenario(Policy.BACKWARD_POST))
    slow = predict_from(calib, Scenario(Policy.BACKWARD_POST, bandwidth_scale=0.1))
    assert slow.step_time_us > same.step_time_us


def test_cli_json_and_trace(measured: Path, tmp_path: Path) -> None:
    trace = tmp_path / "pred"
    proc = cli(
        "whatif", str(measured), "--policy", "backward_pre", "--bandwidth-scale", "0.5",
        "--json", "-", "--trace", str(trace),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    for key in ("step_time_per_step_us", "exposed_comm_per_step_us", "nccl_wait_per_step_us",
                "peak_mem_bytes"):  # fmt: skip
        assert doc[key] > 0, key
    assert doc["scenario"]["policy"] == "backward_pre"
    assert doc["measured_source"]["scenario"] == "backward_post"
    run = load_run(trace, progress=False)
    m = run.manifest
    assert run.world_size == 2 and m is not None and m.predicted is not None and m.engine
    assert m.predicted.scenario == "backward_pre@bw×0.5"
    assert m.engine.policy.value == "backward_pre"
    from overlapscope.analysis import analyze

    a = analyze(run)
    step = float(a.ranks["step_time_per_step_us"].mean())
    assert step == pytest.approx(doc["step_time_per_step_us"], rel=0.01)
    per_step = (1 + LAYERS) + LAYERS + (LAYERS + 1)  # AG fwd (root + units), AG bwd, RS
    assert len(a.collectives) == per_step * len(m.profiled_steps)
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
        (["--policy", "none", "--bandwidth-scale", "inf"], "--bandwidth-scale"),
        (["--policy", "none", "--link-gbit", "nan"], "--link-gbit"),
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


# --- outputs and inputs, on a copy of a bundled sample run ----------------------------------

SAMPLE = Path(__file__).resolve().parents[2] / "traces" / "none"


def one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    return run


def test_trace_never_touches_the_measured_run(sample: Path, tmp_path: Path) -> None:
    before = snapshot(sample)
    for target in (sample, sample / ".." / sample.name, sample / "pred", tmp_path):
        proc = cli("whatif", str(sample), "--policy", "backward_pre", "--trace", str(target),
                   "--force")  # fmt: skip
        one_line_error(proc, "--trace")
        assert snapshot(sample) == before, target


def test_trace_replaces_only_an_earlier_prediction(sample: Path, tmp_path: Path) -> None:
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    one_line_error(
        cli("whatif", str(sample), "--policy", "backward_pre", "--trace", str(other), "--force"),
        "not ours to replace",
    )
    assert (other / "keep.txt").read_text() == "mine"
    pred = tmp_path / "pred"
    args = ["whatif", str(sample), "--policy", "backward_pre", "--trace", str(pred)]
    assert cli(*args).returncode == 0
    one_line_error(cli(*args), "--force")
    assert cli(*args, "--force").returncode == 0
    predicted = json.loads((pred / "run.json").read_text())["predicted"]
    assert predicted["scenario"] == "backward_pre" and predicted["from"] == str(sample.resolve())
    assert pred.stat().st_mode & 0o777 == 0o777 & ~current_umask()  # like a folder you make
    shown = cli("analyze", str(pred))
    assert shown.returncode == 0 and shown.stdout.startswith(
        f"warning: {pred}: a what-if prediction"
    )
    assert not [p for p in tmp_path.iterdir() if ".partial" in p.name or ".old" in p.name]


def test_bad_output_paths_stop_before_anything_is_written(sample: Path, tmp_path: Path) -> None:
    pred = tmp_path / "pred"
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    cases = [
        (["--json", str(tmp_path / "nodir" / "x.json")], "--json"),
        (["--json", str(tmp_path)], "is a directory"),
        (["--trace", str(pred), "--json", str(tmp_path / "nodir" / "x.json")], "--json"),
        (["--trace", str(a_file)], "--trace"),
    ]
    for extra, needle in cases:
        one_line_error(cli("whatif", str(sample), "--policy", "none", *extra), needle)
    assert not pred.exists() and a_file.read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "run"]


def test_a_run_with_a_missing_or_corrupt_rank_is_refused(sample: Path) -> None:
    rank1 = next(sample.glob("rank-1.*"))
    rank1.write_bytes(rank1.read_bytes()[: rank1.stat().st_size // 2])
    one_line_error(cli("whatif", str(sample), "--policy", "backward_pre"), rank1.name)
    rank1.unlink()
    one_line_error(cli("whatif", str(sample), "--policy", "backward_pre"), rank1.name, "missing")


def test_an_unreadable_manifest_is_named(sample: Path) -> None:
    manifest = sample / "run.json"
    manifest.write_text(manifest.read_text()[:50])
    one_line_error(cli("whatif", str(sample), "--policy", "backward_pre"), "run.json", "unreadable")


def test_a_run_of_another_sharding_is_named(sample: Path) -> None:
    manifest = sample / "run.json"
    meta = json.loads(manifest.read_text())
    meta["config"]["engine"]["sharding"] = "shard_grad_op"
    manifest.write_text(json.dumps(meta))
    one_line_error(
        cli("whatif", str(sample), "--policy", "none"), str(sample), "shard_grad_op", "full_shard"
    )


def test_a_trace_dir_that_cannot_be_created_is_one_line(sample: Path) -> None:
    one_line_error(
        cli("whatif", str(sample), "--policy", "none", "--trace", "/proc/overlapscope-x"),
        "--trace /proc/overlapscope-x",
    )


def test_events_left_out_are_warned_as_analyze_warns(sample: Path) -> None:
    """A rank file with bad events: whatif predicts from the rest and says what it left out,
    in the line analyze prints."""
    import gzip

    path = sample / "rank-1.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    bad = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"][:3]
    for e in bad:
        e["dur"] = -5
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    proc = cli("whatif", str(sample), "--policy", "backward_pre", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    analyze = subprocess.run(
        overlapscope_cmd("analyze", str(sample), "--no-progress"), capture_output=True, text=True
    )
    line = next(w for w in analyze.stdout.splitlines() if "negative dur" in w)
    assert line in proc.stderr.splitlines(), (line, proc.stderr)
