"""Exact figures on small hand-built traces (times in µs)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from overlapscope.analysis import analyze
from overlapscope.trace.run.loader import load_run
from tests.trace.kineto import (
    BASE_NS,
    GLOO_TID,
    gloo,
    kernel,
    launch,
    step,
    thread_name,
    trace,
    write,
    x,
)


def cpu_rank_events(first_ag_start: float, shift: float = 0.0) -> list[dict]:
    """overlapscope CPU run, one step [0, 100):

    training thread: ag_fwd/u0 issue [0,1) ag_fwd/u1 issue [1,2) ag_fwd.wait/u0 [2,10)
                     fwd/u0 [10,30) ag_fwd.wait/u1 [30,35) fwd/u1 [35,50)
                     rs/u1 issue [50,51) rs.wait/u1 [51,60) optim/all [60,70)
    comm gloo thread: all_gather u0 [first_ag_start,10) all_gather u1 [10,35)
                      all_reduce u1 [51,60)
    default-group gloo thread: barrier [80,81)
    """

    def t(v: float) -> float:
        return v - shift

    return [
        thread_name(GLOO_TID, "pt_gloo_runloop"),
        thread_name(98, "pt_gloo_runloop"),
        step(3, t(0), 100),
        x("ovs/ag_fwd/u0", t(0), 1),
        x("ovs/ag_fwd/u1", t(1), 1),
        x("ovs/ag_fwd.wait/u0", t(2), 8),
        x("ovs/fwd/u0", t(10), 20),
        x("ovs/ag_fwd.wait/u1", t(30), 5),
        x("ovs/fwd/u1", t(35), 15),
        x("ovs/rs/u1", t(50), 1),
        x("ovs/rs.wait/u1", t(51), 9),
        x("ovs/optim/all", t(60), 10),
        gloo("all_gather", t(first_ag_start), 10 - first_ag_start, 100),
        gloo("all_gather", t(10), 25, 100),
        gloo("all_reduce", t(51), 9, 200),
        gloo("barrier", t(80), 1, 1, tid=98),
    ]


@pytest.fixture
def cpu_run(tmp_path: Path) -> Path:
    write(tmp_path / "rank-0.pt.trace.json.gz", trace(0, 2, cpu_rank_events(1.0)))
    # Rank 1 arrives 3 µs late at the first all-gather; its clock base is 1 ms later and
    # its timestamps 1 ms smaller: after alignment both ranks share one time axis.
    write(
        tmp_path / "rank-1.pt.trace.json.gz",
        trace(1, 2, cpu_rank_events(4.0, shift=1000.0), base_ns=BASE_NS + 1_000_000),
    )
    return tmp_path


def test_cpu_overlapscope_rank_figures(cpu_run: Path):
    a = analyze(load_run(cpu_run))
    r0 = a.ranks.set_index("rank").loc[0]
    # comm = [1,35) + [51,60) + [80,81) = 44; compute = [10,30)+[35,50)+[60,70) = 45
    assert r0["comm_total_us"] == pytest.approx(44)
    assert r0["compute_total_us"] == pytest.approx(45)
    # exposed = [1,10) + [30,35) + [51,60) + [80,81) = 24
    assert r0["exposed_comm_total_us"] == pytest.approx(24)
    assert r0["overlap_pct"] == pytest.approx(100 * 20 / 44)
    # waits: [2,10) + [30,35) + [51,60) = 22
    assert r0["nccl_wait_total_us"] == pytest.approx(22)
    # other: issue and wait ranges while nothing else runs: [0,1) + [50,51)
    assert r0["other_total_us"] == pytest.approx(2)
    # busy = [0,50) + [50,70) + [80,81) = 71 of a 100 µs step
    assert r0["idle_total_us"] == pytest.approx(29)
    assert r0["step_time_total_us"] == pytest.approx(100)
    assert r0["step_time_per_step_us"] == pytest.approx(100)  # one step
    r1 = a.ranks.set_index("rank").loc[1]
    assert r1["comm_total_us"] == pytest.approx(41)  # its first all-gather is 3 µs shorter
    assert a.counted_steps == {0: (3,), 1: (3,)}


def test_cpu_overlapscope_units_by_issue_order(cpu_run: Path):
    a = analyze(load_run(cpu_run))
    u = a.units[a.units["rank"] == 0].set_index(["unit", "phase"])
    assert u.loc[
        ("u0", "ag_fwd"), ["comm_total_us", "exposed_total_us", "wait_total_us"]
    ].tolist() == pytest.approx([9, 9, 8])
    assert u.loc[
        ("u1", "ag_fwd"), ["comm_total_us", "exposed_total_us", "wait_total_us"]
    ].tolist() == pytest.approx([25, 5, 5])
    assert u.loc[
        ("u1", "rs"), ["comm_total_us", "exposed_total_us", "wait_total_us"]
    ].tolist() == pytest.approx([9, 9, 9])
    assert u.loc[("u1", "rs"), "kind"] == "all_reduce"
    assert u.loc[("u0", "ag_fwd"), "bytes_total"] == 100 * 4 * 2  # shard x world size
    # The default-group barrier is communication but belongs to no unit.
    assert a.units[(a.units["rank"] == 0) & (a.units["kind"] == "barrier")]["unit"].isna().all()


def test_cpu_alignment_and_collective_matching(cpu_run: Path):
    run = load_run(cpu_run)
    steps = run.events[run.events["lane"] == "step"].set_index("rank")["ts_us"]
    assert steps.loc[0] == pytest.approx(steps.loc[1])
    a = analyze(run)
    c = a.collectives[(a.collectives["group"] == "ovs-comm")].set_index("seq")
    first = c.loc[0]
    assert first["num_ranks"] == 2
    assert first["transfer_us"] == pytest.approx(6)
    assert first["peer_wait_us"] == pytest.approx(3)
    assert first["straggler_rank"] == 1
    assert first["straggler_lag_us"] == pytest.approx(3)
    assert first["algbw_gbps"] == pytest.approx(800 / 6 / 1e3)
    assert first["busbw_gbps"] == pytest.approx(800 / 6 / 1e3 * 0.5)
    rs = c.loc[2]
    assert rs["kind"] == "all_reduce" and rs["busbw_gbps"] == pytest.approx(800 / 9 / 1e3 * 1.0)


def test_cpu_bound(cpu_run: Path):
    a = analyze(load_run(cpu_run))
    b = a.bound.set_index("rank").loc[0]
    # units: u0 comp 20 comm 9; u1 comp 15 comm 25+9; all comp 10; barrier comm 1 (no unit)
    assert b["serial_per_step_us"] == pytest.approx(29 + 49 + 10 + 1)
    assert b["ideal_per_step_us"] == pytest.approx(20 + 34 + 10 + 1)
    # actual: compute 45 + exposed comm 24 (idle and other time are not what overlap changes)
    assert b["actual_per_step_us"] == pytest.approx(69)
    assert b["step_time_per_step_us"] == pytest.approx(100)
    assert b["overlap_efficiency"] == pytest.approx((89 - 69) / (89 - 65))


def gpu_events() -> list[dict]:
    """One GPU step [0, 100); stream 7 compute, stream 20 NCCL.

    compute [10,30) [40,60) [70,80) [91,95); memcpy [0,5)
    nccl all-gather [25,45) (8000 B), reduce-scatter via ncclDevKernel_Generic [80,90)
    a kernel launched before the step is not counted; an NCCL all-reduce [50,55) whose launch
    the trace lost is counted by its time (a trace of one step: trace/recognize/unlaunched.py),
    under
    compute [40,60).
    """
    ag_args = {
        "Collective name": "_allgather_base",
        "In msg nelems": 1000,
        "Out msg nelems": 2000,
        "dtype": "Float",
        "Group size": 2,
        "Process Group Name": "0",
    }
    rs_args = {
        "Collective name": "_reduce_scatter_base",
        "In msg nelems": 2000,
        "Out msg nelems": 1000,
        "dtype": "BFloat16",
        "Group size": 2,
        "Process Group Name": "0",
    }
    return [
        step(1, 0, 100),
        launch(-20, 1),
        kernel("void pre_step_kernel<float>()", -15, 5, 1),
        x("ovs/bwd/blocks.1", 1, 8),
        launch(2, 2),
        kernel("Memcpy HtoD (Pageable -> Device)", 0, 5, 2, cat="gpu_memcpy"),
        launch(3, 3),
        kernel("void gemm_kernel<float>()", 10, 20, 3),
        x("ovs/ag_bwd/blocks.1", 19, 2),
        launch(20, 4),
        kernel(
            "ncclDevKernel_AllGather_RING_LL(ncclDevComm*)", 25, 20, 4, stream=20, extra=ag_args
        ),
        launch(21, 5),
        kernel("void gemm_kernel<float>()", 40, 20, 5),
        launch(22, 6),
        kernel("void relu_kernel<float>()", 70, 10, 6),
        x("ovs/rs/blocks.1", 23, 2),
        launch(24, 7),
        kernel("ncclDevKernel_Generic", 80, 10, 7, stream=20, extra=rs_args),
        launch(26, 8),
        kernel("void add_kernel<float>()", 91, 4, 8),
        kernel("ncclDevKernel_AllReduce_RING_LL(ncclDevComm*)", 50, 5, 999, stream=21),
    ]


def test_gpu_rank_figures(tmp_path: Path):
    write(tmp_path / "rank-0.json", trace(0, 2, gpu_events(), backend="nccl"))
    run = load_run(tmp_path / "rank-0.json")
    a = analyze(run)
    r = a.ranks.iloc[0]
    # the GPU step: its first kernel (the memcpy at 0) to its last kernel's end (95)
    assert r["step_time_total_us"] == pytest.approx(95)
    assert r["comm_total_us"] == pytest.approx(35)  # with the lost-launch all-reduce
    assert r["num_unlaunched"] == 1
    assert r["compute_total_us"] == pytest.approx(20 + 20 + 10 + 4)
    assert r["exposed_comm_total_us"] == pytest.approx(20)  # [30,40) + [80,90)
    assert r["overlap_pct"] == pytest.approx(100 * 15 / 35)
    # only the gap [80,91) ends right after a collective ends: 10 µs of it under NCCL
    assert r["nccl_wait_total_us"] == pytest.approx(10)
    assert r["memory_total_us"] == pytest.approx(5)
    assert r["exposed_memory_total_us"] == pytest.approx(5)
    # busy [0,5) [10,60) [70,90) [91,95) of [0, 95)
    assert r["idle_total_us"] == pytest.approx(95 - (5 + 50 + 20 + 4))
    assert r["compute_source"] == "gpu_kernels"
    u = a.units.set_index(["unit", "phase"])
    assert u.loc[("blocks.1", "ag_bwd"), "exposed_total_us"] == pytest.approx(10)
    assert u.loc[("blocks.1", "ag_bwd"), "bytes_total"] == 8000
    assert u.loc[("blocks.1", "rs"), "kind"] == "reduce_scatter"
    assert u.loc[("blocks.1", "rs"), "bytes_total"] == 4000
    tl = a.timeline
    assert set(tl["lane"].astype(str)) == {"compute", "comm", "memory"}
    assert (tl["name"] == "void gemm_kernel<float>()").sum() == 2
    assert not (tl["name"] == "void pre_step_kernel<float>()").any()  # launched before the step
    assert tl.loc[tl["lane"] == "comm", "exposed_us"].sum() == pytest.approx(20)
    assert a.exposed_intervals(0)["dur_us"].sum() == pytest.approx(20)
    assert math.isnan(a.collectives["peer_wait_us"].iloc[0])  # one rank: no peers


def test_no_steps_counts_whole_trace(tmp_path: Path):
    events = [e for e in gpu_events() if not e["name"].startswith("ProfilerStep")]
    write(tmp_path / "t.json", trace(0, 1, events, backend="nccl"))
    run = load_run(tmp_path / "t.json")
    assert any("no ProfilerStep" in w for w in run.warnings)
    a = analyze(run)
    # now the pre-step kernel counts too (and the orphan: nothing is excluded)
    assert a.ranks.iloc[0]["compute_total_us"] == pytest.approx(54 + 5)
    assert a.counted_steps == {0: ()}


def test_host_calls_and_annotations_with_a_stream_are_not_gpu_activity(tmp_path: Path):
    """ROCm's hipLaunchKernel carries args.stream; so may a gpu_user_annotation around
    kernels: neither is GPU activity, and kernels launched by a hip* call keep their step."""
    events = [
        e
        if e.get("cat") != "cuda_runtime"
        else {**e, "name": "hipLaunchKernel", "args": {**e["args"], "stream": 7}}
        for e in gpu_events()
    ]
    events.append(x("nccl:all_gather", 20, 30, tid=20, cat="gpu_user_annotation", pid=0))
    events[-1]["args"] = {"stream": 20}
    write(tmp_path / "rank-0.json", trace(0, 2, events, backend="nccl"))
    r = analyze(load_run(tmp_path / "rank-0.json")).ranks.iloc[0]
    assert r["step_time_total_us"] == pytest.approx(95)
    assert r["compute_total_us"] == pytest.approx(54)
    assert r["comm_total_us"] == pytest.approx(35)
