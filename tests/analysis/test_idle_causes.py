"""Where the GPU waits (issue 30 point 1): a known-answer trace with one idle gap of each
cause, and the split's invariants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from overlapscope.analysis import analyze
from overlapscope.analysis.waiting.idle import CAUSE_COLUMNS
from overlapscope.trace.run.loader import load_run
from tests.trace.kineto import kernel, launch, step, trace, write, x

GEMM = "void gemm_kernel<float>()"
MAIN = 1


def cpu(name: str, ts: float, dur: float) -> dict[str, Any]:
    return x(name, ts, dur, tid=MAIN, cat="cpu_op")


def runtime(name: str, ts: float, dur: float = 1.0) -> dict[str, Any]:
    return x(name, ts, dur, tid=MAIN, cat="cuda_runtime", args={"correlation": 9000 + int(ts)})


def one_gap_per_cause() -> list[dict[str, Any]]:
    """One GPU step [100, 1300) on stream 7 (and a side stream 9)::

    K1 [100,200)  gap host_bound [200,300): K2 launched at 290, the thread in aten::add
    K2 [300,400)  gap sync [400,600): cudaStreamSynchronize [350,420) when K2 ended
    K3 [600,700)  gap peer [700,900): the thread in c10d::barrier [710,870)
    K4 [900,1000) S [1000,1050) on stream 9
                  gap cross_stream [1050,1080): K5 queued (at 890) after a
                  cudaStreamWaitEvent (889)
    K5 [1080,1200) gap other [1200,1205): K6 queued (at 895), nothing waited on
    K6 [1205,1300)
    """
    return [
        step(1, 0.0, 2000.0),
        launch(10.0, 1),
        kernel(GEMM, 100.0, 100.0, 1),
        cpu("aten::add", 150.0, 138.0),
        launch(290.0, 2),
        kernel(GEMM, 300.0, 100.0, 2),
        runtime("cudaStreamSynchronize", 350.0, 70.0),
        cpu("aten::copy_", 430.0, 140.0),
        launch(580.0, 3),
        kernel(GEMM, 600.0, 100.0, 3),
        cpu("c10d::barrier", 710.0, 160.0),
        launch(880.0, 4),
        kernel(GEMM, 900.0, 100.0, 4),
        launch(885.0, 5),
        kernel(GEMM, 1000.0, 50.0, 5, stream=9),
        runtime("cudaStreamWaitEvent", 889.0, 0.5),
        launch(890.0, 6),
        kernel(GEMM, 1080.0, 120.0, 6),
        launch(895.0, 7),
        kernel(GEMM, 1205.0, 95.0, 7),
    ]


@pytest.fixture(scope="module")
def causes(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("idle") / "rank-0.json"
    write(path, trace(0, 1, one_gap_per_cause(), backend="nccl"))
    return analyze(load_run(path))


def test_each_gap_gets_its_cause(causes) -> None:
    gaps = causes.idle_gaps
    t0 = 0.0 - float(causes.steps["start_us"].iloc[0]) + 100.0  # the file's time of 0
    got = [
        (round(r.start_us + t0), round(r.end_us + t0), r.cause)
        for r in gaps.itertuples(index=False)
    ]
    assert got == [
        (200, 300, "host_bound"),
        (400, 600, "sync"),
        (700, 900, "peer"),
        (1050, 1080, "cross_stream"),
        (1200, 1205, "other"),
    ]
    host = gaps.set_index("cause")
    assert host.loc["host_bound", "host_op"] == "aten::add"
    assert host.loc["host_bound", "host_activity"] == "other CPU work"
    assert host.loc["peer", "host_activity"] == "collective"
    assert host.loc["peer", "host_op"] == "c10d::barrier"
    assert host.loc["host_bound", "host_tid"] == MAIN
    assert host.loc["cross_stream", "host_tid"] == -1  # queued: no host to blame
    assert (gaps["next_op"] == GEMM).all()


def test_steps_and_ranks_split_idle_by_cause(causes) -> None:
    s = causes.steps.iloc[0]
    assert s["idle_us"] == pytest.approx(100 + 200 + 200 + 30 + 5)
    want = {"host_bound": 100, "sync": 200, "peer": 200, "cross_stream": 30, "other": 5}
    assert {c: s[f"idle_{c}_us"] for c in want} == pytest.approx(want)
    assert sum(s[c] for c in CAUSE_COLUMNS) == s["idle_us"]
    r = causes.ranks.iloc[0]
    assert r["idle_sync_total_us"] == pytest.approx(200)
    assert r["idle_host_bound_per_step_us"] == pytest.approx(100)


def test_per_stream_breakdown_with_htas_categories(causes) -> None:
    """Stream 7's gaps between its own ops, as HTA splits them (host wait: launched after
    the previous op ended; kernel wait: under 30 µs; other) beside our causes."""
    st = causes.idle_streams.set_index("stream").loc[7]
    assert st["num_gaps"] == 5
    assert st["hta_host_wait_total_us"] == pytest.approx(100 + 200 + 200)
    assert st["hta_other_total_us"] == pytest.approx(80)  # [1000,1080): queued, >= 30 µs
    assert st["hta_kernel_wait_total_us"] == pytest.approx(5)
    assert st["host_bound_total_us"] + st["sync_total_us"] + st["peer_total_us"] == (
        pytest.approx(st["hta_host_wait_total_us"])
    )
    assert st["cross_stream_total_us"] == pytest.approx(80)
    assert causes.idle_streams.set_index("stream").loc[9, "num_gaps"] == 0


def test_cpu_ranks_idle_is_other(tmp_path: Path) -> None:
    from tests.trace.kineto import gloo

    events = [step(1, 0.0, 100.0), cpu("aten::mm", 10.0, 20.0), gloo("all_gather", 50.0, 10.0, 4)]
    write(tmp_path / "rank-0.json", trace(0, 1, events))
    a = analyze(load_run(tmp_path / "rank-0.json"))
    s = a.steps.iloc[0]
    assert s["idle_other_us"] == s["idle_us"] > 0
    assert all(s[c] == 0 for c in CAUSE_COLUMNS[:-1])
    assert a.idle_gaps.empty and a.idle_streams.empty
