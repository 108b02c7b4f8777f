"""``overlapscope run``: bad input gives one line naming the cause, and nothing that looks
like a complete run is left behind."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import overlapscope_cmd

TINY = [
    "--layers",
    "2",
    "--dim",
    "32",
    "--heads",
    "2",
    "--seq-len",
    "16",
    "--steps",
    "3",
    "--profile-wait",
    "0",
    "--profile-warmup",
    "1",
    "--profile-active",
    "1",
]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        overlapscope_cmd(*args),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--bogus"], ["unrecognized arguments: --bogus"]),
        (["--policy", "sometimes"], ["--policy", "invalid choice"]),
        (["--nproc", "2", "--global-batch", "3"], ["--global-batch 3", "--nproc 2"]),
        (["--steps", "1"], ["--steps 1", "raise --steps"]),
        (["--limit-all-gathers", "0"], ["limit_all_gathers=0"]),
        (["--device", "cuda"], ["--device cuda"]),
        (["--dim", "30", "--heads", "4"], ["--dim 30", "--heads 4"]),
    ],
    ids=[
        "unknown-flag",
        "bad-policy",
        "batch-not-divisible",
        "too-few-steps",
        "bad-limit",
        "no-cuda",
        "heads-not-dividing-dim",
    ],
)
def test_bad_flags_one_line(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    out = tmp_path / "run"
    proc = run_cli("run", *TINY, *args, "--out", str(out))
    assert_one_line_error(proc, *needles)
    assert not out.exists()


@pytest.mark.multirank
def test_existing_out_refused_then_replaced_with_force(tmp_path: Path) -> None:
    out = tmp_path / "run"
    ok = run_cli("run", *TINY, "--out", str(out))
    assert ok.returncode == 0, ok.stderr
    manifest = json.loads((out / "run.json").read_text())
    assert len(manifest["losses"]) == 3
    assert "step 3/3" in ok.stdout and "traces:" in ok.stdout

    again = run_cli("run", *TINY, "--out", str(out))
    assert_one_line_error(again, "already exists", "--force")
    assert json.loads((out / "run.json").read_text()) == manifest  # untouched

    forced = run_cli("run", *TINY, "--seed", "1", "--out", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert json.loads((out / "run.json").read_text())["config"]["seed"] == 1


@pytest.mark.multirank
def test_failing_rank_leaves_no_complete_looking_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("run", *TINY, "--out", str(out), env={"OVERLAPSCOPE_FAIL_AT": "1:1"})
    assert_one_line_error(proc, "rank 1 failed", "injected failure", "logs:")
    assert not out.exists()
    failed = tmp_path / "run.failed"
    assert not (failed / "run.json").exists()
    assert not (failed / "rank-1.pt.trace.json.gz").exists()  # died inside its window
    assert not list(failed.glob("*.partial"))
    assert "injected failure" in (failed / "logs" / "rank-1.log").read_text()
    # no hidden staging directory is left behind either
    assert [p.name for p in tmp_path.iterdir()] == ["run.failed"]


@pytest.mark.multirank
def test_failed_rerun_with_force_keeps_the_old_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert run_cli("run", *TINY, "--out", str(out)).returncode == 0
    before = (out / "run.json").read_bytes()
    proc = run_cli("run", *TINY, "--out", str(out), "--force", env={"OVERLAPSCOPE_FAIL_AT": "0:0"})
    assert_one_line_error(proc, "rank 0 failed")
    assert (out / "run.json").read_bytes() == before
