"""``analyze`` / ``diagnose`` on real dumps: the text, ``--json``, ``--csv``; the dumps beside
a profiler trace; ``overlapscope run --flight-recorder`` writing them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from overlapscope.cli import main
from tests.conftest import REPO


def test_analyze_json_and_csv_of_dumps_alone(
    slow_rank: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "csv"
    assert main(["analyze", str(slow_rank), "--json", "-", "--csv", str(out)]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    flight = doc["flight"]
    assert set(doc) == {"flight"}  # no profiler traces: the flight report alone
    assert flight["flight_version"] == 1 and len(flight["dumps"]) == 2
    kinds = [(f["kind"], f["rank"]) for f in flight["findings"]]
    assert ("straggler", 1) in kinds
    coll = pd.read_csv(out / "flight_collectives.csv")
    assert len(coll) == len(flight["collectives"]) and {"last_rank", "lag_us", "unit"} <= set(coll)
    assert len(pd.read_csv(out / "flight_ranks.csv")) == 2 * len(coll)
    assert "Flight Recorder: 2 dump(s) (pickle)" in cap.err  # the text goes to stderr


def test_diagnose_puts_the_hang_first(hang: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(hang)]) == 0
    text = capsys.readouterr().out
    first = text.splitlines()[0]
    assert first.startswith("1. collective ") and "never issued by rank 1: a hang" in first
    assert "evidence: issued by 1 of 2 ranks" in text


def test_dumps_beside_traces_give_both_reports(
    fsdp2_profiled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    assert main(["analyze", str(fsdp2_profiled), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["ranks"] and doc["flight"]["collectives"]  # the trace's report and the dumps'
    assert "joined to the profiler trace" in doc["flight"]["join"]
    units = {c["unit"] for c in doc["flight"]["collectives"] if c["unit"] is not None}
    assert units == {"0", "1", "2"}
    assert "Per rank" in text and "Flight Recorder:" in text
    assert main(["diagnose", str(fsdp2_profiled)]) == 0


def test_run_flight_recorder_writes_a_dump_per_rank(tmp_path: Path) -> None:
    """The engine's run with --flight-recorder: a dump per rank under comm_traces/, which
    analyze reads beside its traces. (On gloo the engine moves its units' data over its
    own gloo lane, which the Flight Recorder does not record: the dumps hold the default
    group's collectives, the setup's broadcasts and the run's end.)"""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "overlapscope", "run", "--nproc", "2", "--layers", "2",
           "--dim", "32", "--seq-len", "8", "--global-batch", "2", "--steps", "3",
           "--profile-wait", "0", "--flight-recorder", "64", "--out", str(run)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=300)
    assert sorted(p.name for p in (run / "comm_traces").iterdir()) == ["rank_0", "rank_1"]
    r = subprocess.run(
        [sys.executable, "-m", "overlapscope", "analyze", str(run), "--json", "-"],
        check=True, env=env, capture_output=True, timeout=300, text=True,
    )  # fmt: skip
    flight = json.loads(r.stdout)["flight"]
    ops = [c["op"] for c in flight["collectives"]]
    assert ops[0] == "broadcast" and ops[-1] == "barrier"
    assert all(c["num_ranks"] == 2 for c in flight["collectives"])
    assert "every rank ran on" in flight["clocks"]["note"]  # run.json: one host, one clock
    config = json.loads((run / "config.json").read_text())
    assert config["flight_recorder"] == 64


def test_flight_recorder_flag_default_and_bounds() -> None:
    from overlapscope.cli import build_parser

    p, _ = build_parser(["run"], every=False)
    run = ["run", "--out", "x"]
    assert p.parse_args([*run, "--flight-recorder"]).flight_recorder == 20_000
    assert p.parse_args([*run, "--flight-recorder", "7"]).flight_recorder == 7
    assert p.parse_args(run).flight_recorder is None
    with pytest.raises(SystemExit):
        p.parse_args([*run, "--flight-recorder", "0"])


def test_profiler_only_outputs_are_refused_for_dumps_alone(
    hang: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for flag in ("--markdown", "--perfetto"):
        assert main(["analyze", str(hang), flag, str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{flag} reports profiler traces" in err[0]
        assert not (tmp_path / "out").exists()


def test_the_torch_fsdp_capture_script_writes_dumps(tmp_path: Path) -> None:
    """tests/trace/torch_fsdp_run.py --flight-recorder: its traces and a dump per rank,
    which analyze joins."""
    script = REPO / "tests" / "trace" / "torch_fsdp_run.py"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = tmp_path / "fsdp1"
    subprocess.run([sys.executable, str(script), "fsdp1", str(out), "--flight-recorder"],
                   check=True, env=env, capture_output=True, timeout=300)  # fmt: skip
    assert sorted(p.name for p in (out / "comm_traces").iterdir()) == ["rank_0", "rank_1"]
    r = subprocess.run(
        [sys.executable, "-m", "overlapscope", "analyze", str(out), "--json", "-"],
        check=True, env=env, capture_output=True, timeout=300, text=True,
    )  # fmt: skip
    flight = json.loads(r.stdout)["flight"]
    assert "joined to the profiler trace" in flight["join"]
    assert {c["phase"] for c in flight["collectives"]} >= {"ag_fwd", "ag_bwd", "rs"}
