"""GPU work whose launch the trace lost: in a step where HTA counts it, by its time.

A kernel, copy or memset belongs to the step whose CPU range launched it (correlation id),
as HTA assigns kernels. Real traces hold GPU activity whose correlation id matches no CPU
event: the profiler kept the kernel but not its launch. In the real traces seen, such rows
are mostly the backlog of the step before the first profiled one: a loop that does not wait for the GPU at
a step's end leaves that step's last kernels (launched in the profiler's warm-up, whose CPU
events the trace does not keep) running after the first profiled step began::

    CPU      |ProfilerStep#3 ........................|ProfilerStep#4 ...
    stream 7 [lost][lost][lost][step 3][step 3] ...
             ^ the backlog: ids below all of step 3's, no launch

Where such a row counts is HTA 0.5.0's rule (``Trace._filter_irrelevant_gpu_kernels``),
because the same shape gets both answers from it:

1. a trace of two or more profiled steps: in no step. HTA keeps only GPU work launched by a
   CPU event of the trace, so the backlog is not counted (hta-trace-diff-test: 614 ops;
   the H100 FSDP2 runs in ``traces/gpu-torch-fsdp2-*``: 287 to 376);
2. a trace of one profiled step: in that step, by its time: HTA filters nothing in such a
   trace and counts the backlog (a V100 job: 64 optimizer kernels of the step before).
   Not where the row started before the step began on the CPU (nothing runs before its
   launch, so it cannot be the step's): there HTA, which counts every GPU row of such a
   trace, and we differ.
"""

from __future__ import annotations

import numpy as np

from overlapscope.arrays import BoolArray, FloatArray, IntArray


def unlaunched_steps(
    ts: FloatArray, lost: BoolArray, cpu_steps: tuple[IntArray, FloatArray, FloatArray]
) -> IntArray:
    """The steps of the ``lost`` rows (GPU rows without their launch; ``ts``: every row's
    start), by the rules of the module docstring (-1: none). ``cpu_steps``: the profiler
    steps' numbers and CPU start and end, sorted by number (:func:`cpu_steps`)."""
    numbers, cpu_start, _ = cpu_steps
    start = ts[np.flatnonzero(lost)]
    if len(numbers) != 1:
        return np.full(len(start), -1, dtype=np.int64)
    return np.where(start >= cpu_start[0], numbers[0], -1).astype(np.int64)


def cpu_steps(
    numbers: IntArray, start: FloatArray, end: FloatArray
) -> tuple[IntArray, FloatArray, FloatArray]:
    """The profiler steps' numbers, sorted, and each one's CPU start and end (its
    ``ProfilerStep`` ranges' first start and last end: ``numbers``, ``start``, ``end`` of
    each range)."""
    order = np.argsort(numbers, kind="stable")
    distinct, first = np.unique(numbers[order], return_index=True)
    if not len(distinct):
        return distinct, np.zeros(0), np.zeros(0)
    return (
        distinct,
        np.minimum.reduceat(start[order], first),
        np.maximum.reduceat(end[order], first),
    )


def warning(num_lost: int, num_counted: int, num_steps: int) -> str:
    """The one line a file with lost launches gets (``num_steps``: its profiled steps; with
    none, the whole trace is one step and every row counts, as in HTA)."""
    if num_steps >= 2:
        where = (
            f"left out of the {num_steps} profiled steps, as HTA leaves them out of a trace of "
            "two or more (an earlier step's work, still running)"
        )
    else:
        where = "counted by their time, as HTA counts them in a trace of one step"
    return (
        f"{num_lost} GPU kernels, copies or memsets have no launch in the trace (their "
        f"correlation ids match no CPU event): {where}; {num_counted} of them inside the "
        "profiled steps"
    )
