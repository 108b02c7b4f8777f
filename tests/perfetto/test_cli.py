"""``overlapscope analyze RUN --perfetto FILE`` as a user runs it (issue 35, point 1)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from overlapscope.analysis import analyze
from overlapscope.trace.run.loader import load_run
from tests.conftest import REPO, overlapscope_cmd
from tests.perfetto.chrome_trace import read_trace
from tests.perfetto.conftest import export

RUN = REPO / "traces" / "backward_pre"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        overlapscope_cmd("analyze", *args), capture_output=True, text=True, timeout=300
    )


def test_analyze_writes_the_file(tmp_path: Path) -> None:
    out = tmp_path / "run.json.gz"
    proc = _run(str(RUN), "--perfetto", str(out), "--steps", "3", "--ranks", "0-1")
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out}" in proc.stderr
    trace = read_trace(out)
    assert trace.top["overlapscope_export"]["steps"] == [3]
    assert "exposed" in proc.stdout  # the report is printed as without --perfetto
    assert not list(tmp_path.glob(".*partial*"))


@pytest.mark.parametrize(
    ("run", "flags"),
    [
        ("backward_pre", ()),
        ("backward_pre", ("--steps", "3", "--ranks", "1")),
        ("gpu-torch-fsdp2-default", ()),
    ],
)
def test_the_command_writes_what_the_api_writes(
    tmp_path: Path, out_dir: Path, run: str, flags: tuple[str, ...]
) -> None:
    """The command writes each rank's part in a task from the cached figures; the API
    (write_perfetto) from the loaded run: the same bytes."""
    out = tmp_path / "cli.json.gz"
    proc = _run(str(REPO / "traces" / run), "--perfetto", str(out), *flags)
    assert proc.returncode == 0, proc.stderr
    steps = tuple(int(s) for s in flags[1].split(",")) if flags else None
    ranks = tuple(int(r) for r in flags[3].split(",")) if flags else None
    assert (
        out.read_bytes() == export(REPO / "traces" / run, out_dir, steps, ranks).path.read_bytes()
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--steps", "3"], "--steps chooses what --perfetto writes; add --perfetto FILE"),
        (
            ["--perfetto", "{tmp}/x.json.gz", "--steps", "9"],
            "--steps: step 9 is not in the run (its steps: 2, 3)",
        ),
        (
            ["--perfetto", "{tmp}/x.json.gz", "--ranks", "4"],
            "--ranks: rank 4 is not in the run (its ranks: 0, 1)",
        ),
        (["--perfetto", "{tmp}/no/such/x.json.gz"], "does not exist"),
        (["--perfetto", str(RUN / "rank-0.pt.trace.json.gz")], "would write over the input"),
        (["--perfetto", "{tmp}/x.json.gz", "--steps", "2-x"], "give numbers and ranges"),
    ],
)
def test_bad_flags_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    proc = _run(str(RUN), *(a.format(tmp=tmp_path) for a in args))
    assert proc.returncode == 2
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2 and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.json.gz").exists()


def test_a_gpu_run_has_its_idle_by_cause(tmp_path: Path) -> None:
    """The analysis' GPU idle gaps (issue 30) drawn by cause on the rank's 'GPU idle'
    track, from the figures the command's tasks made: every gap of the run, its cause in
    its name (a slow DataLoader on an H100: host-bound gaps among them)."""
    run = REPO / "traces" / "gpu-torch-fsdp2-slow-loader"
    out = tmp_path / "gpu.json.gz"
    proc = _run(str(run), "--perfetto", str(out))
    assert proc.returncode == 0, proc.stderr
    gaps = analyze(load_run(run)).idle_gaps
    idle = read_trace(out).ours("GPU idle")
    assert len(idle) == len(gaps) > 0
    got = sorted(e["name"] for e in idle)
    assert got == sorted(f"idle: {c}" for c in gaps["cause"])
    assert "idle: host_bound" in got and "idle: sync" in got
