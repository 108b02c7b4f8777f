"""``overlapscope analyze`` / ``diagnose`` on hand-built runs: outputs and JSON schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from overlapscope.analysis import SCHEMA_VERSION
from overlapscope.cli import main
from tests.analysis.test_known_answers import cpu_rank_events
from tests.trace.kineto import BASE_NS, trace, write


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    write(d / "rank-0.pt.trace.json.gz", trace(0, 2, cpu_rank_events(1.0)))
    write(d / "rank-1.pt.trace.json.gz", trace(1, 2, cpu_rank_events(4.0), base_ns=BASE_NS))
    meta = {
        "schema_version": 1,
        "config": {"engine": {"policy": "none", "forward_prefetch": False}, "link_gbit": None},
        "world_size": 2,
        "traces": ["rank-0.pt.trace.json.gz", "rank-1.pt.trace.json.gz"],
        "peak_mem_bytes": [1 << 20, 1 << 20],
    }
    (d / "run.json").write_text(json.dumps(meta))
    (d / "config.json").write_text("{}")  # not a trace: run.json's list is used
    return d


def test_json_to_stdout_follows_the_schema(run_dir, capsys):
    assert main(["analyze", str(run_dir), "--json", "-"]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["run"]["completed_overlapscope_run"] is True
    assert doc["counted_steps"] == {"0": [3], "1": [3]}
    r0 = next(r for r in doc["ranks"] if r["rank"] == 0)
    for key in (
        "rank",
        "step_time_per_step_us",
        "compute_total_us",
        "comm_total_us",
        "exposed_comm_total_us",
        "overlap_pct",
        "nccl_wait_per_step_us",
    ):
        assert key in r0
    assert r0["exposed_comm_total_us"] == pytest.approx(24)
    unit = next(
        u for u in doc["units"] if u["rank"] == 0 and u["unit"] == "u1" and u["phase"] == "ag_fwd"
    )
    assert unit["exposed_total_us"] == pytest.approx(5)
    assert unit["comm_total_us"] == pytest.approx(25)
    assert {"transfer_us", "peer_wait_us", "busbw_gbps", "straggler_rank"} <= set(
        doc["collectives"][0]
    )
    assert set(doc["bound"]) == {"per_rank", "summary"}
    assert doc["hta"]["status"].startswith("not applicable")
    assert "Per rank" in cap.err  # the table goes to stderr when stdout carries JSON
    assert not any("config.json" in w for w in doc["warnings"])


def test_default_table_csv_and_markdown(run_dir, tmp_path, capsys):
    csv_dir = tmp_path / "csv"
    md = tmp_path / "r.md"
    js = tmp_path / "r.json"
    assert (
        main(
            [
                "analyze",
                str(run_dir),
                "--csv",
                str(csv_dir),
                "--markdown",
                str(md),
                "--json",
                str(js),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "Per rank" in out and "Top exposed units" in out and "overlap %" in out
    assert "HTA: not applicable" in out
    assert {p.name for p in csv_dir.iterdir()} >= {
        "ranks.csv",
        "units.csv",
        "collectives.csv",
        "timeline.csv",
        "bound.csv",
    }
    assert md.read_text().startswith("# overlapscope analysis")
    assert json.loads(js.read_text())["schema_version"] == SCHEMA_VERSION


def test_diagnose_ranks_findings_by_stake(run_dir, capsys):
    assert main(["diagnose", str(run_dir)]) == 0
    out = capsys.readouterr().out
    # u0's forward all-gather (9 µs) + u1's (5 µs) are exposed; rank 1 arrives late once
    assert "forward all-gathers are exposed" in out
    assert "forward_prefetch=True" in out
    stakes = [
        float(line.split(": ")[-1].split(" ")[0].replace(",", ""))
        for line in out.splitlines()
        if "µs/step at stake" in line
    ]
    assert stakes == sorted(stakes, reverse=True)


EXTERNAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "external-traces"


@pytest.mark.filterwarnings("ignore::Warning:hta")
def test_hta_figures_beside_ours_on_a_gpu_trace(capsys):
    from overlapscope.analysis.hta.report import hta_available

    trace_file = EXTERNAL / "hta-timeline-sampled-rank0.json.gz"
    if not trace_file.is_file():
        pytest.skip(f"external traces not found at {EXTERNAL.resolve()}")
    if not hta_available():
        pytest.skip("HTA not installed (pip install HolisticTraceAnalysis==0.5.0)")
    assert main(["analyze", str(trace_file), "--hta", "--json", "-"]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    hta = doc["hta"]
    assert hta["status"] == "ran" and hta["include_last_profiler_step"] is True
    assert hta["counted_steps"] == {"0": [551, 552]}
    assert abs(hta["overlap_pct"]["0"] - doc["ranks"][0]["overlap_pct"]) <= 0.5
    assert hta["temporal"][0]["idle_time_us"] > 0
    assert "HTA 0.5.0 beside ours (all steps" in cap.err
