"""A hand-built copy of a real 8-rank V100 job's lost launches (issue 40 point 3): on two of
its ranks, the previous step's optimizer kernels run on the compute stream after the step's
``ProfilerStep`` began and before its first launched kernel, and the trace holds no launch
for them (correlation ids below every one the step launched). HTA 0.5.0 counts them in a
trace of one profiled step and leaves them out of a trace of two: so do we
(trace/recognize/unlaunched.py). Known answers by hand, and HTA's own figures run live beside
them."""

from __future__ import annotations

from pathlib import Path

import pytest

from overlapscope.analysis import analyze
from overlapscope.analysis.hta.report import HtaStatus, hta_available, run_hta
from overlapscope.trace.run.loader import load_run
from tests.analysis.gpu_runs import COMPUTE_STREAM, Rank, write_run
from tests.trace.kineto import kernel

ADAM = "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>>()"
NUM_RANKS = 4
BACKLOG_RANKS = (1, 3)  # the real job: ranks 1 and 3 of 8
NUM_BACKLOG, BACKLOG_DUR = 8, 10.0  # (the real job: 64 kernels)
STEP_US = 1000.0  # each profiled step's CPU range


def _rank(rank: int, num_steps: int) -> Rank:
    r = Rank(rank)
    r.steps(*[(7 + i, i * STEP_US, STEP_US) for i in range(num_steps)])
    if rank in BACKLOG_RANKS:  # the step before's optimizer: from 5 µs, ids below all
        for k in range(NUM_BACKLOG):
            corr = rank * 100_000 - NUM_BACKLOG + k
            ts = 5.0 + k * BACKLOG_DUR
            r.events.append(kernel(ADAM, ts, BACKLOG_DUR, corr, stream=COMPUTE_STREAM))
    for i in range(num_steps):
        t = i * STEP_US
        r.compute(t + 100, 200, at=t + 20)
        r.all_gather(t + 150, 100, at=t + 30)
        r.compute(t + 300, 150, at=t + 40)
    return r


def _run(tmp: Path, num_steps: int) -> Path:
    return write_run(tmp / f"steps-{num_steps}", [_rank(r, num_steps) for r in range(NUM_RANKS)])


# per profiled step: busy [100, 450) of which comm [150, 250) is under compute [100, 300)
KERNELS = (100.0, 450.0)
COMPUTE = 200.0 + 150.0
BACKLOG = NUM_BACKLOG * BACKLOG_DUR  # [5, 85), before the step's first launched kernel


def _figures(path: Path) -> dict[int, tuple[float, float, float]]:
    a = analyze(load_run(path))
    r = a.ranks.set_index("rank")
    return {
        rank: (row["step_time_total_us"], row["compute_total_us"], row["idle_total_us"])
        for rank, row in r.iterrows()
    }


def test_one_step_counts_the_backlog_by_its_time(tmp_path: Path) -> None:
    path = _run(tmp_path, num_steps=1)
    run = load_run(path)
    lines = [w for w in run.warnings if "no launch in the trace" in w]
    assert len(lines) == len(BACKLOG_RANKS)
    assert all(f"{NUM_BACKLOG} of them inside the profiled steps" in w for w in lines)
    for rank, (span, compute, idle) in _figures(path).items():
        if rank in BACKLOG_RANKS:  # the step runs from the backlog's first kernel
            assert (span, compute) == (KERNELS[1] - 5.0, COMPUTE + BACKLOG)
            assert idle == 100.0 - 85.0  # the gap [85, 100)
        else:
            assert (span, compute, idle) == (KERNELS[1] - KERNELS[0], COMPUTE, 0.0)


def test_two_steps_leave_the_backlog_out(tmp_path: Path) -> None:
    path = _run(tmp_path, num_steps=2)
    run = load_run(path)
    lines = [w for w in run.warnings if "no launch in the trace" in w]
    assert len(lines) == len(BACKLOG_RANKS)
    assert all(w.endswith("0 of them inside the profiled steps") for w in lines)
    for span, compute, _ in _figures(path).values():
        # step 7 from its first launched kernel to step 8's first, step 8 its own kernels
        assert (span, compute) == (STEP_US + KERNELS[1] - KERNELS[0], 2 * COMPUTE)


@pytest.mark.filterwarnings("ignore::Warning:hta")
@pytest.mark.skipif(
    not hta_available(), reason="HTA not installed (pip install HolisticTraceAnalysis==0.5.0)"
)
@pytest.mark.parametrize("num_steps", [1, 2])
def test_htas_own_figures_are_ours(tmp_path: Path, num_steps: int) -> None:
    """HTA 0.5.0 run live on the same files: its kernel span, idle, compute and non-compute
    per rank equal ours (whole-µs times: no rounding to tell apart)."""
    run = load_run(_run(tmp_path, num_steps))
    report = run_hta(run)
    assert report.status == HtaStatus.RAN and report.temporal is not None
    theirs = report.temporal.set_index("rank")
    ours = analyze(run).ranks.set_index("rank")
    assert sorted(theirs.index) == list(range(NUM_RANKS))
    for rank, h in theirs.iterrows():
        r = ours.loc[rank]
        busy = r["exposed_comm_total_us"] + r["exposed_memory_total_us"] + r["other_total_us"]
        assert (
            r["step_time_total_us"],
            r["idle_total_us"],
            r["compute_total_us"],
            busy,
        ) == (
            h["kernel_time_us"],
            h["idle_time_us"],
            h["compute_time_us"],
            h["non_compute_time_us"],
        ), rank
