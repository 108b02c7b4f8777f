"""``overlapscope sweep`` end to end: tiny GPT, 2 gloo ranks on CPU, real runs, real analysis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from overlapscope.sweep import SUMMARY_COLUMNS
from tests.lab.support import needs_lab

REPO = Path(__file__).resolve().parents[2]
TINY = ["--model", "gpt", "--layers", "2", "--dim", "64", "--heads", "2", "--seq-len", "32"]
TINY += ["--vocab", "256", "--nproc", "2", "--steps", "4", "--global-batch", "4"]
TINY += ["--device", "cpu", "--threads-per-rank", "1"]


def _sweep(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "overlapscope", "sweep", "--out", str(out), *TINY, *extra],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.multirank
@pytest.mark.slow
def test_sweep_writes_every_output_with_every_column_filled(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    proc = _sweep(out, "--policies", "none,backward_pre+limit", "--repeats", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]

    csv = pd.read_csv(out / "summary.csv")
    assert list(csv.columns) == SUMMARY_COLUMNS
    assert list(csv["config"]) == ["none", "backward_pre+limit=2"]
    assert list(csv["repeats"]) == [2, 2]
    filled = [c for c in SUMMARY_COLUMNS if c != "limit_all_gathers"]
    assert not csv[filled].isna().any().any(), csv.to_string()
    # The rate-limiter column is filled exactly where the limiter is on.
    assert csv["limit_all_gathers"].isna().tolist() == [True, False]
    assert (csv["step_time_per_step_ms"] > 0).all() and (csv["peak_mem_mib"] > 0).all()
    assert (csv["step_time_per_step_min_ms"] <= csv["step_time_per_step_ms"]).all()
    assert ((csv["overlap_pct"] >= 0) & (csv["overlap_pct"] <= 100)).all()

    doc = json.loads((out / "summary.json").read_text())
    assert len(doc["runs"]) == 4 and len(doc["summary"]) == 2
    assert all(v is not None for r in doc["runs"] for v in r.values())
    assert doc["sweep"]["nproc"] == 2 and doc["sweep"]["seed"] == 0

    md = (out / "summary.md").read_text()
    assert "| none |" in md and "| backward_pre+limit=2 |" in md and "n/a" not in md
    html = (out / "tradeoff.html").read_text()
    assert "plotly" in html and "backward_pre+limit=2" in html
    for cfg in ("none", "backward_pre+limit=2"):
        for rep in (0, 1):
            assert (out / "runs" / cfg / f"rep-{rep}" / "run.json").exists()


def test_sweep_refuses_existing_out_without_force(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    proc = _sweep(tmp_path, "--policies", "none", "--repeats", "1")
    assert proc.returncode == 2
    assert "already exists" in proc.stderr
    assert (tmp_path / "keep.txt").exists()


def test_sweep_bad_policy_is_one_line(tmp_path: Path) -> None:
    proc = _sweep(tmp_path / "s", "--policies", "none,eager")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "overlapscope: error: --policies: 'eager' is not a policy; use one of none, "
        "backward_post, backward_pre, each optionally followed by +limit[=K], +fwd, "
        "+ckpt[=all|every-N], +offload"
    ]


def _assert_one_line(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--policies", "backward_pre+ckpt=bogus"], ["--policies", "'ckpt=bogus'", "every-N"]),
        (["--policies", "none", "--checkpoint-units", "bogus"], ["--checkpoint-units", "every-N"]),
        (["--policies", "none", "--lr", "nan"], ["--lr", "finite number > 0"]),
        (["--policies", "none", "--limit-all-gathers", "0"], ["--limit-all-gathers", ">= 1"]),
    ],
    ids=["bad-ckpt-modifier", "bad-checkpoint-units", "nan-lr", "zero-limit"],
)
def test_sweep_bad_values_leave_nothing_behind(
    tmp_path: Path, extra: list[str], needles: list[str]
) -> None:
    out = tmp_path / "sw1"
    _assert_one_line(_sweep(out, *extra), *needles)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_sweep_out_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.json"
    foreign.write_text("{}")
    _assert_one_line(_sweep(foreign, "--policies", "none", "--force"), "--out", "is a file")
    assert foreign.read_text() == "{}"


def test_sweep_help_is_plain_and_lists_every_modifier() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "overlapscope", "sweep", "--help"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "``" not in proc.stdout
    for mod in ("+limit[=K]", "+fwd", "+ckpt[=all|every-N]", "+offload"):
        assert mod in proc.stdout, mod
    assert "(default: None)" not in proc.stdout and "(default: False)" not in proc.stdout


@pytest.mark.root
@pytest.mark.multirank
@needs_lab
def test_sweep_over_the_lab_link(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    proc = _sweep(out, "--policies", "backward_pre", "--repeats", "1", "--link-gbit", "0.5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "summary.json").read_text())
    assert doc["sweep"]["link_gbit"] == 0.5
    run = json.loads((out / "runs" / "backward_pre" / "rep-0" / "run.json").read_text())
    assert run["config"]["link_gbit"] == 0.5


@pytest.mark.multirank
def test_sweep_compares_checkpointing_and_offload_in_one_table(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    proc = _sweep(out, "--policies", "backward_pre+ckpt,backward_post+offload", "--repeats", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    csv = pd.read_csv(out / "summary.csv")
    assert list(csv["config"]) == ["backward_pre+ckpt=all", "backward_post+offload"]
    assert (csv["peak_mem_mib"] > 0).all() and (csv["throughput_samples_s"] > 0).all()
    runs = out / "runs"
    ckpt = json.loads((runs / "backward_pre+ckpt=all" / "rep-0" / "run.json").read_text())
    assert ckpt["config"]["engine"]["checkpoint_units"] == "all"
    assert not ckpt["config"]["engine"]["cpu_offload"]
    off = json.loads((runs / "backward_post+offload" / "rep-0" / "run.json").read_text())
    assert off["config"]["engine"]["cpu_offload"]
    assert off["config"]["engine"]["checkpoint_units"] == "none"
