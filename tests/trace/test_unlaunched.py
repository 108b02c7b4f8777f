"""GPU work whose launch the trace lost (trace/recognize/unlaunched.py): a known-answer trace that
drops some launches. In a trace of one profiled step each lost kernel, copy or memset counts
in that step by its time, in compute or communication like any other; in a trace of two or
more it counts in none, as HTA 0.5.0 counts it. Either way the file gets one warning line
with how many there were and how many count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from overlapscope.analysis import analyze
from overlapscope.trace.recognize.unlaunched import unlaunched_steps
from overlapscope.trace.run.loader import load_run
from tests.trace.kineto import kernel, launch, step, trace, write

GEMM = "sm90_xmma_gemm_bf16"
AG = "ncclDevKernel_AllGather_RING_LL(x)"

# (name, start, dur, stream, launch ts or None when the trace lost it); CPU step 1 = [1000,
# 2000), and with two steps 2 = [2000, 3000).
KERNELS: list[tuple[str, float, float, int, float | None]] = [
    (GEMM, 900.0, 20.0, 11, None),  # ran before step 1 began on the CPU
    (GEMM, 1050.0, 30.0, 7, None),  # the step before's backlog, before step 1's first kernel
    (GEMM, 1100.0, 100.0, 7, 1010.0),
    (GEMM, 1250.0, 30.0, 7, None),  # between two kernels of step 1 on its stream
    (GEMM, 1300.0, 100.0, 7, 1020.0),
    (AG, 1500.0, 100.0, 9, None),  # communication on its own stream
    (GEMM, 2050.0, 40.0, 7, None),  # after step 1's CPU range
    (GEMM, 2100.0, 100.0, 7, 1030.0),
]
NUM_LOST = sum(k[4] is None for k in KERNELS)


def _trace(tmp: Path, num_steps: int, keep_all: bool = False) -> Path:
    spans = [step(1, 1000.0, 1000.0), step(2, 2000.0, 1000.0)][:num_steps]
    events: list[dict[str, Any]] = list(spans)
    for i, (name, ts, dur, stream, at) in enumerate(KERNELS):
        corr = 100 + i
        events.append(kernel(name, ts, dur, corr, stream=stream))
        if at is not None or keep_all:
            events.append(launch(at if at is not None else 1005.0, corr))
    path = tmp / f"rank-0-{num_steps}-{keep_all}.json"
    return write(path, trace(0, 1, events, backend="nccl"))


def _lost_lines(run) -> list[str]:  # type: ignore[no-untyped-def]
    return [w for w in run.warnings if "no launch in the trace" in w]


def test_one_step_counts_lost_work_by_its_time(tmp_path: Path) -> None:
    run = load_run(_trace(tmp_path, num_steps=1), allow_missing_ranks=True)
    gpu = run.events[run.events["on_gpu"]].sort_values("ts_us")
    # all but the one that ran before the step began on the CPU
    assert gpu["step"].tolist() == [-1, 1, 1, 1, 1, 1, 1, 1]
    assert _lost_lines(run) == [
        f"rank 0 (rank-0-1-False.json): {NUM_LOST} GPU kernels, copies or memsets have no "
        "launch in the trace (their correlation ids match no CPU event): counted by their "
        f"time, as HTA counts them in a trace of one step; {NUM_LOST - 1} of them inside the "
        "profiled steps"
    ]
    a = analyze(run)
    r = a.ranks.iloc[0]
    assert r["num_unlaunched"] == NUM_LOST
    t0 = min(k[1] for k in KERNELS)  # the run's time 0: its earliest event
    s = a.steps.set_index("step").loc[1]
    # the step runs from its first GPU op (the lost one at 1050) to its last end (2200)
    assert (s["start_us"] + t0, s["end_us"] + t0) == (1050.0, 2200.0)
    assert s["compute_us"] == 30 + 100 + 30 + 100 + 40 + 100
    assert s["exposed_comm_us"] == 100.0  # the lost all-gather, as communication
    assert len(a.collectives) == 1 and a.collectives["step"].iloc[0] == 1


def test_two_steps_leave_lost_work_out(tmp_path: Path) -> None:
    run = load_run(_trace(tmp_path, num_steps=2), allow_missing_ranks=True)
    gpu = run.events[run.events["on_gpu"]].sort_values("ts_us")
    launched = [k[4] is not None for k in KERNELS]
    assert gpu["step"].tolist() == [1 if ok else -1 for ok in launched]
    assert _lost_lines(run) == [
        f"rank 0 (rank-0-2-False.json): {NUM_LOST} GPU kernels, copies or memsets have no "
        "launch in the trace (their correlation ids match no CPU event): left out of the 2 "
        "profiled steps, as HTA leaves them out of a trace of two or more (an earlier step's "
        "work, still running); 0 of them inside the profiled steps"
    ]
    a = analyze(run)
    assert a.ranks.iloc[0]["num_unlaunched"] == NUM_LOST
    s = a.steps.set_index("step").loc[1]
    t0 = min(k[1] for k in KERNELS)
    assert (s["start_us"] + t0, s["end_us"] + t0) == (1100.0, 2200.0)
    assert s["compute_us"] == 300.0 and a.collectives.empty


@pytest.mark.parametrize("num_steps", [1, 2])
def test_with_every_launch_there_is_no_warning(tmp_path: Path, num_steps: int) -> None:
    """Where the launch is known the kernel follows it (here, every one in step 1's CPU
    range), and nothing is warned."""
    run = load_run(_trace(tmp_path, num_steps, keep_all=True), allow_missing_ranks=True)
    gpu = run.events[run.events["on_gpu"]]
    assert (gpu["step"] == 1).all()
    assert not _lost_lines(run)
    assert analyze(run).ranks.iloc[0]["num_unlaunched"] == 0


@pytest.mark.parametrize(
    ("ts", "num_steps", "want"),
    [
        (5.0, 1, 1),  # after the step began on the CPU
        (500.0, 1, 1),  # after it ended on the CPU: the GPU runs behind
        (-5.0, 1, -1),  # before it began
        (5.0, 2, -1),  # two steps: none
        (50.0, 2, -1),
        (5.0, 0, -1),  # no steps at all (the whole trace is one: every row counts)
    ],
)
def test_rules_on_arrays(ts: float, num_steps: int, want: int) -> None:
    numbers = np.arange(1, num_steps + 1)
    cpu = (numbers, 30.0 * (numbers - 1), 30.0 * numbers)
    got = unlaunched_steps(np.asarray([1.0, ts]), np.asarray([False, True]), cpu)
    assert got.tolist() == [want]
