"""A hand-built FSDP2-on-GPU trace with known answers: NCCL kernels launched inside
``FSDP::all_gather (<fqn>)`` and ``FSDP::post_backward_reduce (<fqn>)`` on their own streams,
compute kernels launched between each unit's hooks."""

from __future__ import annotations

import pytest

from overlapscope.analysis import analyze
from overlapscope.trace.run.loader import load_run
from tests.trace.kineto import kernel, launch, step, trace, write, x

AG_STREAM, RS_STREAM, COMPUTE_STREAM = 20, 21, 7


def nccl(op: str, ts: float, dur: float, corr: int, stream: int) -> dict:
    coll = {"AllGather": "_allgather_base", "ReduceScatter": "_reduce_scatter_base"}[op]
    args = {"Collective name": coll, "In msg nelems": 1000, "Out msg nelems": 2000}
    args |= {"dtype": "Float", "Group size": 2, "Process Group Name": "0"}
    return kernel(f"ncclDevKernel_{op}_RING_LL(ncclDevComm*)", ts, dur, corr, stream, extra=args)


def gemm(ts: float, dur: float, corr: int) -> dict:
    return kernel("void gemm_kernel<float>()", ts, dur, corr, COMPUTE_STREAM)


def events() -> list[dict]:
    """CPU (one thread)                         GPU
    [1,6)   pre_forward (l0)   AG l0 launched   AG l0   [10,20)  stream 20
    7       fwd l0 launched                     gemm    [20,40)
    [10,15) pre_forward (l1)   AG l1 launched   AG l1   [20,35)  stream 20 (hidden)
    16      fwd l1 launched                     gemm    [40,50)
    [20,22) pre_backward (l1); 23 bwd l1        gemm    [50,70)
    [25,30) post_backward_reduce (l1)           RS l1   [70,80)  stream 21 (hidden)
    [31,33) pre_backward (l0); 34 bwd l0        gemm    [70,90)
    [36,40) post_backward_reduce (l0)           RS l0   [90,100) stream 21
    """
    return [
        step(1, 0, 45),
        x("FSDP::pre_forward (l0)", 1, 5),
        x("FSDP::all_gather (l0)", 2, 3),
        launch(3, 1),
        nccl("AllGather", 10, 10, 1, AG_STREAM),
        launch(7, 2),
        gemm(20, 20, 2),
        x("FSDP::post_forward (l0)", 8, 1),
        x("FSDP::pre_forward (l1)", 10, 5),
        x("FSDP::all_gather (l1)", 11, 3),
        launch(12, 3),
        nccl("AllGather", 20, 15, 3, AG_STREAM),
        launch(16, 4),
        gemm(40, 10, 4),
        x("FSDP::post_forward (l1)", 17, 1),
        x("FSDP::pre_backward (l1)", 20, 2),
        launch(23, 5),
        gemm(50, 20, 5),
        x("FSDP::post_backward_reduce (l1)", 25, 5),
        launch(26, 6),
        nccl("ReduceScatter", 70, 10, 6, RS_STREAM),
        x("FSDP::pre_backward (l0)", 31, 2),
        launch(34, 7),
        gemm(70, 20, 7),
        x("FSDP::post_backward_reduce (l0)", 36, 4),
        launch(37, 8),
        nccl("ReduceScatter", 90, 10, 8, RS_STREAM),
    ]


@pytest.fixture(scope="module")
def analysis(tmp_path_factory: pytest.TempPathFactory):
    path = write(
        tmp_path_factory.mktemp("fsdp2gpu") / "rank-0.json", trace(0, 2, events(), backend="nccl")
    )
    run = load_run(path)
    assert run.ranks[0].framework == "fsdp2"
    return analyze(run)


def test_partition(analysis):
    r = analysis.ranks.iloc[0]
    assert r["step_time_total_us"] == pytest.approx(90)  # first kernel 10 to last end 100
    assert r["compute_total_us"] == pytest.approx(70)  # [20, 90)
    assert r["comm_total_us"] == pytest.approx(45)  # [10,35) + [70,80) + [90,100)
    assert r["exposed_comm_total_us"] == pytest.approx(20)  # [10,20) + [90,100)
    assert r["idle_total_us"] == pytest.approx(0)
    assert r["overlap_pct"] == pytest.approx(100 * 25 / 45)


def test_collectives_by_unit_and_phase(analysis):
    u = analysis.units.set_index(["unit", "phase"])
    assert u.loc[("l0", "ag_fwd"), "exposed_total_us"] == pytest.approx(10)
    assert u.loc[("l1", "ag_fwd"), "exposed_total_us"] == pytest.approx(0)
    assert u.loc[("l1", "rs"), "exposed_total_us"] == pytest.approx(0)
    assert u.loc[("l0", "rs"), "exposed_total_us"] == pytest.approx(10)
    assert u.loc[("l1", "ag_fwd"), "comm_total_us"] == pytest.approx(15)
    assert set(u["kind"]) == {"all_gather", "reduce_scatter"}


def test_compute_by_unit_and_bound(analysis):
    tl = analysis.timeline[analysis.timeline["lane"] == "compute"]
    by = tl.groupby(["unit", "phase"], observed=True)["dur_us"].sum().to_dict()
    assert by == {("l0", "fwd"): 20, ("l1", "fwd"): 10, ("l1", "bwd"): 20, ("l0", "bwd"): 20}
    b = analysis.bound.iloc[0]
    # units: l0 compute 40 comm 20; l1 compute 30 comm 25
    assert b["serial_per_step_us"] == pytest.approx(60 + 55)
    assert b["ideal_per_step_us"] == pytest.approx(40 + 30)
    assert b["actual_per_step_us"] == pytest.approx(70 + 20)
    assert b["overlap_efficiency"] == pytest.approx((115 - 90) / (115 - 70), abs=1e-6)
