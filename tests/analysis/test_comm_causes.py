"""Exposed communication split by cause (issue 30 point 2): issued late by the host, waiting
for the last rank, transfer longer than the compute meant to hide it. A known-answer
2-rank GPU run, one collective of each kind."""

from __future__ import annotations

import pytest

from overlapscope.analysis import analyze
from overlapscope.trace.run.loader import load_run
from tests.analysis.gpu_runs import Rank, write_run

PARTS = ("host_late", "peer_wait", "transfer")


def three_all_gathers() -> list[Rank]:
    """Both ranks: step [0, 1000) on the CPU.

    AG1 (seq 0) on time, longer than its compute: compute [0,100), AG [20,150) on both
        ranks: exposed [100,150) = 50 of transfer each.
    AG2 (seq 1) rank 0 early, waits for rank 1: rank 0 compute [150,250), AG [200,400);
        rank 1 compute [150,300), AG [300,400) (launched at 290, its compute still running).
        transfer = 100 (rank 1's); rank 0 waits [200,300): exposed [250,400) = 50 waiting
        + 100 transfer; rank 1: 100 transfer.
    AG3 (seq 2) rank 1's host late: rank 1 compute [400,500), AG launched at 600 (its GPU
        out of work since 500), [610,700); rank 0 compute [400,480), AG at 410, [450,700).
        transfer = 90; rank 0 waits [450,610): exposed [480,700) = 130 waiting + 90
        transfer; rank 1: 90 issued late.
    """
    r0 = Rank(0).steps((1, 0.0, 1000.0))
    r0.compute(0, 100, at=1).all_gather(20, 130, at=10)
    r0.compute(150, 100, at=140).all_gather(200, 200, at=160)
    r0.compute(400, 80, at=390).all_gather(450, 250, at=410)
    r1 = Rank(1).steps((1, 0.0, 1000.0))
    r1.compute(0, 100, at=1).all_gather(20, 130, at=10)
    r1.compute(150, 150, at=140).all_gather(300, 100, at=290)
    r1.compute(400, 100, at=390).cpu("aten::_foreach_add_", 480, 118).all_gather(610, 90, at=600)
    return [r0, r1]


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory):
    folder = write_run(tmp_path_factory.mktemp("causes") / "run", three_all_gathers())
    return analyze(load_run(folder))


WANT = {  # (rank, seq) -> host late, waiting for the last rank, transfer
    (0, 0): (0, 0, 50),
    (1, 0): (0, 0, 50),
    (0, 1): (0, 50, 100),
    (1, 1): (0, 0, 100),
    (0, 2): (0, 130, 90),
    (1, 2): (90, 0, 0),
}


def test_each_collective_on_each_rank(split) -> None:
    cr = split.collective_ranks.set_index(["rank", "seq"])
    for key, want in WANT.items():
        got = tuple(cr.loc[key, f"exposed_{p}_us"] for p in PARTS)
        assert got == pytest.approx(want), key
        assert sum(got) == pytest.approx(cr.loc[key, "exposed_us"])


def test_units_and_ranks_carry_the_split(split) -> None:
    for rank in (0, 1):
        mine = {k: v for k, v in WANT.items() if k[0] == rank}
        want = [sum(v[i] for v in mine.values()) for i in range(3)]
        r = split.ranks.set_index("rank").loc[rank]
        got = [r[f"exposed_comm_{p}_total_us"] for p in PARTS]
        assert got == pytest.approx(want)
        assert sum(got) == pytest.approx(r["exposed_comm_total_us"])
        u = split.units[split.units["rank"] == rank]
        assert [u[f"exposed_{p}_total_us"].sum() for p in PARTS] == pytest.approx(want)
        assert u[[f"exposed_{p}_per_step_us" for p in PARTS]].sum(axis=1).sum() == (
            pytest.approx(u["exposed_per_step_us"].sum())
        )


def test_prefetch_is_recommended_only_for_the_transfer_part(split) -> None:
    """The all-gathers here are no FSDP unit's (phase unknown): no prefetch finding; the
    idle before rank 1's late all-gather is host-bound."""
    kinds = {f.kind.value for f in split.findings}
    assert not kinds & {"forward_all_gather_exposed", "backward_all_gather_exposed"}
    gaps = split.idle_gaps[split.idle_gaps["rank"] == 1]
    late = gaps[gaps["next_op"].astype(str).str.startswith("ncclDevKernel")]
    assert late["cause"].tolist() == ["host_bound"]
    assert late["host_op"].tolist() == ["aten::_foreach_add_"]


def test_identical_on_a_cpu_run_without_launches() -> None:
    """CPU gloo runs have no launch: nothing is issued late; the rest splits between the
    wait for the last rank and the transfer, and adds up."""
    from tests.conftest import REPO

    a = analyze(load_run(REPO / "traces" / "backward_pre"))
    r = a.ranks
    assert (r["exposed_comm_host_late_total_us"] == 0).all()
    total = sum(r[f"exposed_comm_{p}_total_us"] for p in PARTS)
    assert (abs(total - r["exposed_comm_total_us"]) < 1e-6 * r["exposed_comm_total_us"]).all()
    assert (r["exposed_comm_peer_wait_total_us"] > 0).all()
