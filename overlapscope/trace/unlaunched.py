"""GPU work whose launch the trace lost is still work: its step, by its time on its stream.

A kernel, copy or memset belongs to the step whose CPU range launched it (correlation id),
as HTA assigns kernels. Real traces hold GPU activity whose correlation id matches no CPU
event (the profiler dropped the launch, or it came before the CPU events were recorded).
Such a row is assigned by time, as the steps tile the GPU's time::

    launched  stream 7  [step 4][step 4]      [step 5]
    lost      stream 7                  [?]               -> step 4: before step 5's
    windows   |step 4 ......................|step 5 ....     first kernel (any stream)

1. the GPU window holding its start: step N runs from the first launched kernel of N to
   the first of N+1 (the partition's steps). Before the first window, the first step;
   but none (-1) where its correlation id is below every one the first step launched: it
   was launched before that step (ids grow with each launch), and runs into the profiled
   steps because the loop does not wait for the GPU at a step's end; its launch fell in the
   profiler's warm-up, whose CPU events the trace does not keep (torch FSDP2 on an H100,
   traces/gpu-torch-fsdp2-free-running: 376 such ops, all ended before the first window);
2. kept between the steps of the launched work before and after it on its own stream (a
   stream runs its work in launch order);
3. never a step whose CPU range starts after the row ran (nothing runs before its
   launch): then the CPU step holding its start, or none (-1).
"""

from __future__ import annotations

import numpy as np

from overlapscope.arrays import BoolArray, FloatArray, IntArray


def _neighbours(
    stream: IntArray, ts: FloatArray, known: BoolArray, lost: IntArray, step: IntArray
) -> tuple[IntArray, IntArray]:
    """Per lost row, the step of the launched row before it and after it on its stream
    (-2: none; by start, launched rows first on equal starts)."""
    before = np.full(len(lost), -2, dtype=np.int64)
    after = np.full(len(lost), -2, dtype=np.int64)
    for s in np.unique(stream[lost]).tolist():
        mine = np.flatnonzero(known & (stream == s))
        mine = mine[np.argsort(ts[mine], kind="stable")]
        q = np.flatnonzero(stream[lost] == s)
        at = np.searchsorted(ts[mine], ts[lost[q]], side="right")
        has_before, has_after = at > 0, at < len(mine)
        before[q[has_before]] = step[mine[at[has_before] - 1]]
        after[q[has_after]] = step[mine[at[has_after]]]
    return before, after


def unlaunched_steps(
    ts: FloatArray,
    stream: IntArray,
    step: IntArray,
    lost: BoolArray,
    cpu_steps: tuple[IntArray, FloatArray, FloatArray],
    correlation: IntArray | None = None,
) -> IntArray:
    """The steps of the ``lost`` rows (GPU rows without their launch; ``step``: every row's
    step, the lost rows' ignored), by the rules of the module docstring. ``cpu_steps``: the
    profiler steps' numbers and CPU start and end, sorted by number; ``correlation``: every
    row's correlation id (negative: none), for rule 1."""
    numbers, cpu_start, cpu_end = cpu_steps
    rows = np.flatnonzero(lost)
    out = np.full(len(rows), -1, dtype=np.int64)
    if not len(rows) or not len(numbers):
        return out
    known = (stream >= 0) & ~lost
    counted = known & (step >= 0)
    # 1. the window: the last step whose first launched kernel started at or before it
    first = np.full(len(numbers), np.inf)
    at = np.searchsorted(numbers, step[counted])
    np.minimum.at(first, at, ts[counted])
    first = np.minimum.accumulate(first[::-1])[::-1]  # a step without kernels: the next one's
    pos = np.searchsorted(first, ts[rows], side="right") - 1
    window = numbers[np.maximum(pos, 0)]
    # 2. between the launched work around it on its stream (-1, -2: no bound)
    before, after = _neighbours(stream, ts, known, rows, step)
    window = np.where(before >= 0, np.maximum(window, before), window)
    window = np.where(after >= 0, np.minimum(window, after), window)
    # 3. not a step that began on the CPU after it ran: the CPU step holding it, or none
    begun = cpu_start[np.searchsorted(numbers, window)] <= ts[rows]
    holding = np.searchsorted(cpu_start, ts[rows], side="right") - 1
    inside = (holding >= 0) & (ts[rows] < cpu_end[np.maximum(holding, 0)])
    by_cpu = np.where(inside, numbers[np.maximum(holding, 0)], -1)
    out[:] = np.where(begun, window, by_cpu)
    # 1. before the first window and launched before the first step's first launch: earlier
    if correlation is not None and counted.any():
        first_step = step[counted].min()
        launched = correlation[counted & (step == first_step)]
        launched = launched[launched >= 0]
        if len(launched):
            corr = correlation[rows]
            out[(pos < 0) & (corr >= 0) & (corr < launched.min())] = -1
    return out


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


def warning(num_lost: int, num_counted: int) -> str:
    """The one line a file with lost launches gets."""
    return (
        f"{num_lost} GPU kernels, copies or memsets have no launch in the trace (their "
        "correlation ids match no CPU event): assigned to steps by their time on their "
        f"stream, {num_counted} of them inside the profiled steps"
    )
