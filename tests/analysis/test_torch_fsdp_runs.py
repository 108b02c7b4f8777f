"""Per-unit exposed all-gather and reduce-scatter on real torch FSDP1 / FSDP2 CPU runs
(2 gloo ranks, made here with torch's own FSDP)."""

from __future__ import annotations

from pathlib import Path

import pytest

from overlapscope.analysis import analyze
from overlapscope.trace.run.loader import load_run


def check_units(path: Path, framework: str, unit_names: set[str]) -> None:
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
        # torch FSDP on CPU waits for every gloo collective inside the range that issued it
        # (not compute), and gloo closes the op's range before it wakes the waiter: no
        # compute runs during a transfer, so every collective is wholly exposed
        assert u["exposed_total_us"].to_numpy() == pytest.approx(u["comm_total_us"].to_numpy())
    r = a.ranks.set_index("rank")
    assert (r["overlap_pct"] == 0).all(), r["overlap_pct"]
    assert r["exposed_comm_total_us"].to_numpy() == pytest.approx(r["comm_total_us"].to_numpy())
    assert (r["num_steps"] == 2).all()
    assert a.collectives["num_ranks"].eq(2).all()
    check_compute_units(a, unit_names)


PARTS = ["compute", "exposed_comm", "exposed_memory", "other", "idle"]


def check_compute_units(a, unit_names: set[str]) -> None:
    """Compute is attributed to units (forward and backward), the partition adds up and the
    bound is defined: collectives are synchronous on CPU, so nothing overlaps."""
    for table, suffix in ((a.steps, "_us"), (a.ranks, "_total_us")):
        total = sum(table[f"{p}{suffix}"] for p in PARTS)
        assert (abs(total - table[f"step_time{suffix}"]) < 1e-3).all()
    for rank in (0, 1):
        rows = a.timeline[(a.timeline["rank"] == rank) & (a.timeline["lane"] == "compute")]
        fwd = set(rows.loc[rows["phase"] == "fwd", "unit"].dropna())
        bwd = set(rows.loc[rows["phase"] == "bwd", "unit"].dropna())
        assert fwd == unit_names and bwd == unit_names, (rank, fwd, bwd)
    b = a.bound.set_index("rank")
    assert (b["num_units"] == len(unit_names) + 1).all()  # + compute outside every unit
    # nothing overlaps (see check_units): the step's comm + compute is the serial bound
    assert b["actual_per_step_us"].to_numpy() == pytest.approx(b["serial_per_step_us"].to_numpy())
    assert (b["overlap_efficiency"] == 0).all(), b["overlap_efficiency"]


@pytest.mark.multirank
def test_fsdp2_units_from_labels(fsdp2_run):
    check_units(fsdp2_run, "fsdp2", {"0", "1", "2"})


@pytest.mark.multirank
def test_fsdp1_units_from_order(fsdp1_run):
    check_units(fsdp1_run, "fsdp1", {"unit0", "unit1", "unit2"})
