"""GPU work whose launch the trace lost is still work (issue 30 point 7): a known-answer
trace that drops some launches. Each lost kernel, copy or memset is assigned to a step by
its time on its own stream, counts in compute or communication like any other, and the
file gets one warning line with how many there were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from overlapscope.analysis import analyze
from overlapscope.trace.loader import load_run
from overlapscope.trace.unlaunched import unlaunched_steps
from tests.trace.kineto import kernel, launch, step, trace, write

GEMM = "sm90_xmma_gemm_bf16"
AG = "ncclDevKernel_AllGather_RING_LL(x)"

# (name, start, dur, stream, launch ts or None when the trace lost it, the step it belongs to)
# CPU steps: 1 = [1000, 2000), 2 = [2000, 3000).
KERNELS: list[tuple[str, float, float, int, float | None, int]] = [
    (GEMM, 1040.0, 5.0, 11, None, -1),  # launched before step 1's first launch (id below)
    (GEMM, 1050.0, 30.0, 7, None, 1),  # before step 1's first launched kernel: the V100 case
    (GEMM, 1100.0, 100.0, 7, 1010.0, 1),
    (GEMM, 1250.0, 30.0, 7, None, 1),  # between two kernels of step 1 on its stream
    (GEMM, 1300.0, 100.0, 7, 1020.0, 1),
    (AG, 1500.0, 100.0, 9, None, 1),  # communication on its own stream, in step 1's window
    (GEMM, 2050.0, 40.0, 7, None, 1),  # after step 1's work, before step 2's first kernel
    (GEMM, 2100.0, 100.0, 7, 2010.0, 2),
    (GEMM, 2150.0, 10.0, 11, None, 2),  # another stream, nothing around it: its window
    (GEMM, 2300.0, 100.0, 7, 2020.0, 2),
    (GEMM, 900.0, 20.0, 11, None, -1),  # ran before step 1 began on the CPU: no step
]
NUM_LOST = sum(k[4] is None for k in KERNELS)
# correlation ids grow with each launch: 100 + the row's index, but the V100 case's (its
# launch dropped within step 1: an id among step 1's) and the earlier step's (below all)
CORRELATION = {1050.0: 150, 1040.0: 50}


def _trace(tmp: Path, keep_all: bool) -> Path:
    events: list[dict[str, Any]] = [step(1, 1000.0, 1000.0), step(2, 2000.0, 1000.0)]
    for i, (name, ts, dur, stream, at, _) in enumerate(KERNELS):
        corr = CORRELATION.get(ts, 100 + i)
        events.append(kernel(name, ts, dur, corr, stream=stream))
        if at is not None or keep_all:
            events.append(launch(at if at is not None else ts - 5.0, corr))
    return write(tmp / f"rank-0-{keep_all}.json", trace(0, 1, events, backend="nccl"))


def test_lost_launches_are_assigned_by_time_and_counted(tmp_path: Path) -> None:
    run = load_run(_trace(tmp_path, keep_all=False), allow_missing_ranks=True)
    gpu = run.events[run.events["on_gpu"]].sort_values(["ts_us", "stream"])
    want = [k[5] for k in sorted(KERNELS, key=lambda k: (k[1], k[3]))]
    assert gpu["step"].tolist() == want
    lines = [w for w in run.warnings if "no launch in the trace" in w]
    assert lines == [
        f"rank 0 (rank-0-False.json): {NUM_LOST} GPU kernels, copies or memsets have no "
        "launch in the trace (their correlation ids match no CPU event): assigned to steps "
        f"by their time on their stream, {NUM_LOST - 2} of them inside the profiled steps"
    ]
    a = analyze(run)
    r = a.ranks.iloc[0]
    assert r["num_unlaunched"] == NUM_LOST
    steps = a.steps.set_index("step")
    t0 = min(k[1] for k in KERNELS)  # the run's time 0: its earliest event
    # step 1 runs from its first GPU op (the lost one at 1050) to step 2's first (2100: the
    # one at 2050 is step 1's own)
    assert (steps.loc[1, "start_us"] + t0, steps.loc[1, "end_us"] + t0) == (1050.0, 2100.0)
    assert steps.loc[1, "compute_us"] == 30 + 100 + 30 + 100 + 40
    assert steps.loc[1, "exposed_comm_us"] == 100.0  # the lost all-gather, as communication
    assert (steps.loc[2, "start_us"] + t0, steps.loc[2, "end_us"] + t0) == (2100.0, 2400.0)
    assert steps.loc[2, "compute_us"] == 100 + 100  # (the 10 µs one runs under the first)
    assert len(a.collectives) == 1 and a.collectives["step"].iloc[0] == 1


def test_with_every_launch_the_steps_are_the_same(tmp_path: Path) -> None:
    """Where the launch is known the kernel follows it (here, into the steps the rules
    give when it is lost), and nothing is warned."""
    run = load_run(_trace(tmp_path, keep_all=True), allow_missing_ranks=True)
    gpu = run.events[run.events["on_gpu"]].sort_values(["ts_us", "stream"])
    want = [k[5] for k in sorted(KERNELS, key=lambda k: (k[1], k[3]))]
    # the launches put in for the lost ones are 5 µs before each: the same steps, but for
    # the kernel of 2050 (launched at 2045, in step 2's CPU range), the one of 1040
    # (launched at 1035, in step 1's) and the one before step 1
    starts = [k[1] for k in sorted(KERNELS, key=lambda k: (k[1], k[3]))]
    want[starts.index(2050.0)] = 2
    want[starts.index(1040.0)] = 1
    assert gpu["step"].tolist() == want
    assert not [w for w in run.warnings if "no launch in the trace" in w]
    assert analyze(run).ranks.iloc[0]["num_unlaunched"] == 0


@pytest.mark.parametrize(
    ("ts", "stream", "want"),
    [
        (5.0, 7, 1),  # before every window, after step 1 began: step 1
        (25.0, 7, 1),  # inside step 1's window
        (35.0, 7, 1),  # after step 1's last kernel on stream 7, before step 2's window
        (45.0, 7, 2),  # ... and in step 2's window (its first kernel ran at 40 on stream 9)
        (65.0, 7, 2),
        (45.0, 8, 2),  # another stream: step 2's window (it began at 40 on stream 9)
        (-5.0, 8, -1),  # before step 1 began on the CPU: none
        (200.0, 8, 2),  # past every window and CPU step: the last (it may run late)
    ],
)
def test_rules_on_arrays(ts: float, stream: int, want: int) -> None:
    # launched: stream 7 at 10 (step 1) and 60 (step 2); stream 9 at 40 (step 2)
    known_ts = [10.0, 60.0, 40.0]
    all_ts = np.asarray([*known_ts, ts])
    streams = np.asarray([7, 7, 9, stream])
    steps = np.asarray([1, 2, 2, -1])
    lost = np.asarray([False, False, False, True])
    cpu = (np.asarray([1, 2]), np.asarray([0.0, 30.0]), np.asarray([30.0, 100.0]))
    got = unlaunched_steps(all_ts, streams, steps, lost, cpu)
    assert got.tolist() == [want]
