"""Per-unit exposed all-gather and reduce-scatter on real torch FSDP1 / FSDP2 CPU runs
(2 gloo ranks, made here with torch's own FSDP)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from overlapscope.analysis import analyze
from overlapscope.trace.loader import load_run
from overlapscope.trace.schema import Framework

SCRIPT = Path(__file__).resolve().parents[1] / "trace" / "torch_fsdp_run.py"


def make(kind: str, out: Path) -> Path:
    subprocess.run(
        [sys.executable, str(SCRIPT), kind, str(out)], check=True, capture_output=True, timeout=240
    )
    return out


@pytest.fixture(scope="module")
def fsdp2_run(tmp_path_factory) -> Path:
    return make("fsdp2", tmp_path_factory.mktemp("fsdp2"))


@pytest.fixture(scope="module")
def fsdp1_run(tmp_path_factory) -> Path:
    return make("fsdp1", tmp_path_factory.mktemp("fsdp1"))


def check_units(path: Path, framework: Framework, unit_names: set[str]) -> None:
    run = load_run(path)
    assert {r.framework for r in run.ranks} == {framework}
    a = analyze(run)
    assert list(a.ranks["rank"]) == [0, 1]
    for rank in (0, 1):
        u = a.units[a.units["rank"] == rank]
        # every collective was attributed to a unit and a phase
        assert u["unit"].notna().all() and u["phase"].notna().all()
        for phase in ("ag_fwd", "ag_bwd", "rs"):
            names = set(u.loc[u["phase"] == phase, "unit"])
            assert names, f"rank {rank}: no {phase}"
            assert names <= unit_names
        assert set(u.loc[u["phase"] == "ag_fwd", "unit"]) == unit_names
        ag = u[u["kind"] == "all_gather"]
        assert (
            ag["bytes_total"] == ag["num_ops"] * 2 * 4 * 2080
        ).all()  # 2 ranks x 2080-float shards
        # gloo collectives are synchronous on CPU: they are (almost) all exposed
        assert u["exposed_total_us"].sum() > 0.9 * u["comm_total_us"].sum()
    r = a.ranks.set_index("rank")
    assert (r["overlap_pct"] < 10).all()
    assert (r["num_steps"] == 2).all()
    assert a.collectives["num_ranks"].eq(2).all()


@pytest.mark.multirank
def test_fsdp2_units_from_labels(fsdp2_run):
    check_units(fsdp2_run, Framework.FSDP2, {"0", "1", "2"})


@pytest.mark.multirank
def test_fsdp1_units_from_order(fsdp1_run):
    check_units(fsdp1_run, Framework.FSDP1, {"unit0", "unit1", "unit2"})
