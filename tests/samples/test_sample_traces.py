"""The shipped sample sweep (``traces/``) opens with ``overlapscope analyze`` and makes sense.

Every expectation is derived from the files themselves (``run.json``, ``summary.json``) or
from what the policies mean, never from numbers copied out of the traces, so the test keeps
holding when the samples are regenerated with ``traces/README.md``'s command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from overlapscope.cli import main

TRACES = Path(__file__).resolve().parents[2] / "traces"
# the CPU sweep's runs (traces/gpu-*: the GPU fixtures, tests/samples/test_gpu_fixtures.py)
RUN_DIRS = sorted(
    p.parent for p in TRACES.glob("*/run.json") if not p.parent.name.startswith("gpu-")
)
IDS = [d.name for d in RUN_DIRS]


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """``overlapscope analyze RUN --json FILE`` on every sample run, keyed by sweep label."""
    out = tmp_path_factory.mktemp("analysis")
    runs: dict[str, dict[str, Any]] = {}
    for run_dir in RUN_DIRS:
        report = out / f"{run_dir.name}.json"
        assert main(["analyze", str(run_dir), "--json", str(report)]) == 0
        meta = json.loads((run_dir / "run.json").read_text())
        runs[run_dir.name] = {  # the sweep's label: traces/<config>/
            "dir": run_dir,
            "meta": meta,
            "analysis": json.loads(report.read_text()),
        }
    return runs


@pytest.fixture(scope="module")
def summary() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((TRACES / "summary.json").read_text())
    return doc


def _exposed_backward_all_gather_us(analysis: dict[str, Any]) -> float:
    """Exposed backward all-gather per step, summed over units, mean over ranks."""
    total = sum(u["exposed_per_step_us"] for u in analysis["units"] if u["phase"] == "ag_bwd")
    return float(total) / len(analysis["ranks"])


def test_every_configuration_of_the_sweep_is_shipped(summary, samples):
    configs = [row["config"] for row in summary["summary"]]
    assert sorted(configs) == sorted(samples)
    for label, s in samples.items():
        engine = s["meta"]["config"]["engine"]
        assert label.split("+")[0] == engine["policy"], label
        assert ("+limit" in label) == (engine["limit_all_gathers"] is not None), label
    policies = {s["meta"]["config"]["engine"]["policy"] for s in samples.values()}
    assert policies == {"none", "backward_post", "backward_pre"}
    assert any(s["meta"]["config"]["engine"]["limit_all_gathers"] for s in samples.values())
    assert summary["sweep"]["link_gbit"] is not None  # made over a shaped lab link


@pytest.mark.parametrize("run_dir", RUN_DIRS, ids=IDS)
def test_sample_run_is_complete(run_dir: Path) -> None:
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["world_size"] == len(meta["traces"]) >= 2
    for name in meta["traces"]:
        assert (run_dir / name).stat().st_size > 0


def test_analysis_covers_every_rank_and_profiled_step(samples):
    for label, s in samples.items():
        meta, analysis = s["meta"], s["analysis"]
        assert analysis["run"]["completed_overlapscope_run"], label
        assert analysis["run"]["world_size"] == meta["world_size"], label
        expected = {str(r): meta["profiled_steps"] for r in range(meta["world_size"])}
        assert analysis["counted_steps"] == expected, label
        assert analysis["warnings"] == [], label
        for r in analysis["ranks"]:
            assert r["compute_total_us"] > 0 and r["comm_total_us"] > 0, (label, r["rank"])
            assert 0 <= r["exposed_comm_total_us"] <= r["comm_total_us"] * (1 + 1e-9), (
                label,
                r["rank"],
            )
            assert 0 <= r["overlap_pct"] <= 100, (label, r["rank"])


def test_every_unit_is_gathered_with_its_full_size(samples):
    for label, s in samples.items():
        full = {u["name"]: u["full_bytes"] for u in s["meta"]["units"]}
        gathers = [c for c in s["analysis"]["collectives"] if c["kind"] == "all_gather"]
        assert {c["unit"] for c in gathers} == set(full), label
        for c in gathers:
            assert c["bytes"] == full[c["unit"]], (label, c["unit"])
        phases = {u["phase"] for u in s["analysis"]["units"]}
        assert {"ag_fwd", "ag_bwd", "rs"} <= phases, label


def test_summary_matches_the_analysis(summary, samples):
    """The sweep's step time is the analysis' (slowest rank per step, median over steps)."""
    for row in summary["runs"]:
        steps = samples[row["config"]]["analysis"]["steps"]
        per_step: dict[int, float] = {}
        for s in steps:
            per_step[s["step"]] = max(per_step.get(s["step"], 0.0), s["step_time_us"])
        assert row["step_time_per_step_ms"] == pytest.approx(
            np.median(list(per_step.values())) / 1e3
        )


def test_backward_prefetch_hides_backward_all_gathers(samples):
    none = _exposed_backward_all_gather_us(samples["none"]["analysis"])
    pre = _exposed_backward_all_gather_us(samples["backward_pre"]["analysis"])
    assert none > 0
    assert pre < none


def test_prefetch_keeps_more_units_alive_and_the_limiter_caps_them(samples):
    def alive(label: str) -> int:
        return max(samples[label]["meta"]["max_alive_in_backward"])

    assert alive("none") == 1  # on demand: one unit at a time
    assert alive("backward_post") == 1  # issued after the unit's compute, as it is freed
    assert alive("backward_pre") == 2  # issued before the unit's compute: two alive
    for label, s in samples.items():
        limit = s["meta"]["config"]["engine"]["limit_all_gathers"]
        if limit is not None:
            assert max(s["meta"]["max_alive_units"]) <= max(limit, 1), label


def test_prefetch_costs_memory(samples):
    def peak(label: str) -> int:
        return max(samples[label]["meta"]["peak_mem_bytes"])

    unit_bytes = max(u["full_bytes"] for u in samples["none"]["meta"]["units"])
    # A second unit's full parameters are alive in backward_pre's backward: it costs memory,
    # at most one unit more. (Not always a whole unit: `none`'s own peak is set by the
    # gradients still waiting for their reduce-scatters at the end of backward.)
    extra = peak("backward_pre") - peak("none")
    assert 0 < extra <= unit_bytes, (extra, unit_bytes)
