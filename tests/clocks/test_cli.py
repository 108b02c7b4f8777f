"""The user's check from issue 22, end to end: shift one rank's trace file by 20 ms and run
``diagnose`` and ``analyze`` again."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import orjson

from tests.conftest import REPO, overlapscope_cmd

RUN = REPO / "traces" / "backward_pre"


def shifted_copy(tmp: Path, rank: int, shift_us: float) -> Path:
    """A copy of the shipped run with every timestamp of ``rank``'s trace moved."""
    out = tmp / "shifted"
    shutil.copytree(RUN, out)
    path = out / f"rank-{rank}.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    for ev in doc["traceEvents"]:
        if isinstance(ev.get("ts"), (int, float)):
            ev["ts"] = ev["ts"] + shift_us
    path.write_bytes(gzip.compress(orjson.dumps(doc)))
    return out


def cli(*args: str) -> str:
    proc = subprocess.run(overlapscope_cmd(*args), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def straggler_line(report: str) -> str:
    return next(line for line in report.splitlines() if "arrives last" in line)


def test_diagnose_does_not_move_with_a_shifted_clock(tmp_path: Path) -> None:
    moved = shifted_copy(tmp_path, 1, -20000.0)
    want = straggler_line(cli("diagnose", str(RUN), "--no-progress"))
    assert straggler_line(cli("diagnose", str(moved), "--no-progress")) == want
    # As recorded, the shifted clock makes rank 0 look ~20 ms late (what the issue saw).
    raw = cli("diagnose", str(moved), "--no-progress", "--no-align")
    assert "rank 0 arrives last" in raw and straggler_line(raw) != want


def test_analyze_prints_and_writes_offsets_and_path(tmp_path: Path) -> None:
    moved = shifted_copy(tmp_path, 1, 20000.0)
    out = tmp_path / "a.json"
    text = cli("analyze", str(moved), "--no-progress", "--json", str(out))
    assert "clocks: aligned on rank 0's clock" in text
    assert "critical path over 2 steps" in text
    doc = json.loads(out.read_text())
    (r1,) = [r for r in doc["clocks"]["offsets"] if r["rank"] == 1]
    base = json.loads(cli("analyze", str(RUN), "--no-progress", "--json", "-"))
    (b1,) = [r for r in base["clocks"]["offsets"] if r["rank"] == 1]
    assert abs(r1["offset_us"] - b1["offset_us"] - 20000.0) <= 0.05 * 20000.0
    assert doc["clocks"]["applied"] is True and r1["num_collectives"] == 28
    steps = doc["critical_path"]["steps"]
    assert [s["step"] for s in steps] == [2, 3]
    for s in steps:
        links = [k for k in doc["critical_path"]["links"] if k["step"] == s["step"]]
        assert abs(sum(k["dur_us"] for k in links) - s["step_us"]) < 1e-6 * s["step_us"]


def test_csv_carries_offsets_and_path(tmp_path: Path) -> None:
    out = tmp_path / "csv"
    cli("analyze", str(RUN), "--no-progress", "--csv", str(out))
    offsets = (out / "clock_offsets.csv").read_text().splitlines()
    assert offsets[0].startswith("rank,reference_rank,offset_us") and len(offsets) == 3
    assert (out / "critical_path_steps.csv").read_text().count("\n") == 3
    assert "saving_us" in (out / "critical_path_links.csv").read_text().splitlines()[0]
