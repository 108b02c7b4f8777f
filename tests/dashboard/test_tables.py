"""Overview / findings / trade-off rows from small hand-made analysis tables."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dashboards.tables import (
    OVERVIEW_COLUMNS,
    findings_table,
    overview_table,
    straggler_summary,
    tradeoff_table,
    unit_sort_key,
)
from overlapscope.analysis.findings import Finding, FindingKind
from overlapscope.config import EngineConfig, ModelConfig, Policy, RunConfig
from overlapscope.manifest import RunManifest

from .helpers import analysis, loaded

RANKS = pd.DataFrame(
    {
        "rank": [0, 1],
        "num_steps": [2, 2],
        "step_time_per_step_us": [400_000.0, 500_000.0],
        "exposed_comm_per_step_us": [50_000.0, 30_000.0],
        "nccl_wait_per_step_us": [40_000.0, 20_000.0],
        "overlap_pct": [30.0, 50.0],
    }
)
CONFIG = RunConfig(
    engine=EngineConfig(policy=Policy.BACKWARD_PRE, limit_all_gathers=2),
    model=ModelConfig(seq_len=128),
    global_batch=8,
)
META = RunManifest(config=CONFIG, engine=CONFIG.engine, peak_mem_bytes=(64 * 2**20, 32 * 2**20))
COLLECTIVES = pd.DataFrame({"busbw_gbps": [1.0, 2.0, 4.0]})


def _run() -> object:
    return loaded("r", "backward_pre", analysis(ranks=RANKS, collectives=COLLECTIVES), META)


def test_overview_rows_per_rank_with_units_converted() -> None:
    t = overview_table([_run()])  # type: ignore[list-item]
    assert tuple(t.columns) == OVERVIEW_COLUMNS
    r0 = t.iloc[0]
    assert r0["run"] == "r" and r0["policy"] == "backward_pre+limit=2" and r0["rank"] == 0
    assert r0["step_ms"] == pytest.approx(400.0)
    assert r0["exposed_comm_per_step_ms"] == pytest.approx(50.0)  # total / num_steps
    assert r0["nccl_wait_per_step_ms"] == pytest.approx(40.0)
    assert r0["throughput_tok_s"] == pytest.approx(8 * 128 / 0.4)
    assert t["peak_mem_mib"].tolist() == [64.0, 32.0]
    assert t["busbw_gbit_s"].tolist() == [16.0, 16.0]  # median over the run's collectives, x8


def test_overview_without_run_json_leaves_gaps() -> None:
    t = overview_table([loaded("r", "none", analysis(ranks=RANKS, collectives=COLLECTIVES))])
    assert t["peak_mem_mib"].isna().all() and t["throughput_tok_s"].isna().all()
    assert overview_table([]).empty


def test_tradeoff_is_one_row_per_run_mean_time_max_memory() -> None:
    t = tradeoff_table(overview_table([_run()]))  # type: ignore[list-item]
    assert len(t) == 1
    assert t.loc[0, "step_ms"] == pytest.approx(450.0)
    assert t.loc[0, "peak_mem_mib"] == pytest.approx(64.0)


def test_findings_rows_in_stake_order_with_ms() -> None:
    findings = (
        Finding(FindingKind.BACKWARD_ALL_GATHER_EXPOSED, 5000.0, "bwd exposed", "ev", "try a"),
        Finding(FindingKind.STRAGGLER, 1000.0, "rank 1 last", "ev2", "try b", rank=1),
    )
    t = findings_table([loaded("r", "none", analysis(findings=findings))])
    assert t["title"].tolist() == ["bwd exposed", "rank 1 last"]
    assert t["stake_ms"].tolist() == [5.0, 1.0]
    assert math.isnan(t["rank"].iloc[0]) and t["rank"].iloc[1] == 1


def test_straggler_summary_names_the_rank_most_often_last() -> None:
    coll = pd.DataFrame(
        {
            "num_ranks": [2, 2, 2, 1],
            "straggler_rank": [1, 1, 0, 0],
            "straggler_lag_us": [2000.0, 4000.0, 500.0, 0.0],
        }
    )
    lines = straggler_summary(coll)
    assert lines[0] == "rank 1 started last at 2 of 3 collectives (67%), median lag 3.00 ms"
    assert lines[1].startswith("rank 0 started last at 1 of 3")


@pytest.mark.parametrize(
    ("units", "expected"),
    [
        (["blocks.10", "root", "blocks.2", "all"], ["root", "blocks.2", "blocks.10", "all"]),
        (["unit3", "unit12", "unit1"], ["unit1", "unit3", "unit12"]),
    ],
    ids=["module-paths", "fsdp1-units"],
)
def test_unit_order(units: list[str], expected: list[str]) -> None:
    assert sorted(units, key=unit_sort_key) == expected
