"""The time model: each step of each rank partitioned into parts that add up.

Per rank and step, the timeline of the device that does the work (the GPU's kernels where
the rank has any; the training threads on CPU-only runs) is cut into::

    step = compute + exposed_comm + exposed_memory + other + idle

* ``compute``: union of the compute intervals (see ``lane`` in the schema) inside the step;
* ``exposed_comm``: communication while no compute runs;
* ``exposed_memory``: memory copies / sets while neither compute nor communication runs;
* ``other``: the rest of the device's recorded activity (GPU: sync and other non-compute
  kernels; CPU: collective issue and wait ranges) while none of the above runs;
* ``idle``: the step's time where nothing is recorded.

Each part is computed as an interval set, and ``idle`` as the step minus the others, so the
five add up to the step to the last bit of float precision.

On GPU ranks the communication is the GPU's collective kernels (and NCCL's copies) plus the
collectives that run on the host (gloo, the engine's staged transfers): HTA sees only the
former, so where a rank has host collectives HTA's idle is our idle plus what of them is
exposed.

The steps themselves (:func:`step_windows`): on GPU ranks a step starts at its first kernel
(kernels belong to the step whose CPU range launched them, as HTA assigns them) and lasts
until the next step's first kernel; the last step ends at the last kernel of the counted
steps. The steps thus tile the GPU's span from the first to the last kernel, which is HTA's
``kernel_time``; their parts add up to HTA's temporal breakdown (idle, compute, and
non-compute = exposed comm + exposed memory + other). On CPU ranks a step is its
``ProfilerStep#N`` range. A rank without profiler steps is one step (``step`` -1) spanning
its device's events.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.analysis.intervals import Intervals, clip, split, subtract, union, union_of
from overlapscope.phases import Lane, Phase
from overlapscope.trace.recognize.table import ComputeSource


def _codes(column: pd.Series) -> Callable[[str], int]:
    """The code of a value in a categorical column (-2, which no row has, when absent)."""
    categories = column.cat.categories

    def code(value: str) -> int:
        return int(categories.get_loc(value)) if value in categories else -2

    return code


def any_of(codes: np.ndarray, wanted: list[int]) -> np.ndarray:
    """``np.isin(codes, wanted)`` for a few wanted codes, one comparison each (``np.isin``
    costs ~0.2 ms on a GPU rank's rows for one code, ~200 times a comparison: measured)."""
    mask = np.zeros(len(codes), dtype=bool)
    for c in wanted:
        mask |= codes == c
    return mask


@dataclass(frozen=True, slots=True)
class LaneSets:
    """The device's activity of one rank as interval sets, one per lane."""

    compute: Intervals
    comm: Intervals
    memory: Intervals
    other: Intervals
    wait: Intervals
    limiter: Intervals

    @staticmethod
    def of(rows: pd.DataFrame, source: ComputeSource) -> LaneSets:
        """``rows``: one rank's counted rows. GPU ranks keep only GPU activity."""
        # Lanes and phases compared by their categorical codes: turning the columns into
        # arrays of strings cost more than the rest of this function (measured).
        all_lane = rows["lane"].cat.codes.to_numpy()
        code = _codes(rows["lane"])
        wait = all_lane == code(Lane.WAIT.value)
        limiter = (
            rows["phase"].cat.codes.to_numpy() == _codes(rows["phase"])(Phase.LIMITER.value)
        ) & wait
        rs, re_ = rows["ts_us"].to_numpy(), rows["end_us"].to_numpy()
        waiting = wait & ~limiter
        on_device = rows["on_gpu"].to_numpy() if source is ComputeSource.GPU_KERNELS else None
        lane = all_lane if on_device is None else all_lane[on_device]
        s = rs if on_device is None else rs[on_device]
        e = re_ if on_device is None else re_[on_device]

        def pick(*lanes: Lane) -> Intervals:
            mask = any_of(lane, [code(x.value) for x in lanes])
            return union(s[mask], e[mask])

        comm = pick(Lane.COMM)
        if source is ComputeSource.GPU_KERNELS:
            other = pick(Lane.OTHER)
            # Collectives that run on the host (gloo, also with CUDA tensors: the engine's
            # staged transfers) are the GPU's communication too: it waits for them.
            assert on_device is not None
            host = ~on_device & (all_lane == code(Lane.COMM.value))
            if host.any():
                comm = union_of(comm, union(rs[host], re_[host]))
        else:
            other = pick(Lane.WAIT, Lane.ISSUE)
        return LaneSets(
            compute=pick(Lane.COMPUTE),
            comm=comm,
            memory=pick(Lane.MEMORY),
            other=other,
            wait=union(rs[waiting], re_[waiting]),
            limiter=union(rs[limiter], re_[limiter]),
        )

    def span(self) -> tuple[float, float] | None:
        """First start and last end of the device's activity (None: nothing recorded)."""
        parts = [x for x in (self.compute, self.comm, self.memory, self.other) if len(x)]
        if not parts:
            return None
        return min(float(x.starts[0]) for x in parts), max(float(x.ends[-1]) for x in parts)


@dataclass(frozen=True, slots=True)
class Parts:
    """One step's partition (µs); ``compute + exposed_comm + exposed_memory + other + idle
    == step_time``. ``comm`` and ``memory`` are the whole (not only exposed) union inside the
    step."""

    step_time_us: float
    compute_us: float
    exposed_comm_us: float
    exposed_memory_us: float
    other_us: float
    idle_us: float
    comm_us: float
    memory_us: float
    overlap_pct: float


def partition(sets: LaneSets, start_us: float, end_us: float) -> Parts:
    """Partition ``[start_us, end_us)`` of one rank's device timeline."""
    compute = clip(sets.compute, start_us, end_us)
    comm = clip(sets.comm, start_us, end_us)
    memory = clip(sets.memory, start_us, end_us)
    other = clip(sets.other, start_us, end_us)
    exposed_comm, hidden = split(comm, compute)
    covered = union_of(compute, comm)
    exposed_memory = subtract(memory, covered)
    covered = union_of(covered, memory)
    exposed_other = subtract(other, covered)
    step = max(0.0, end_us - start_us)
    busy = compute.total + exposed_comm.total + exposed_memory.total + exposed_other.total
    comm_us = comm.total
    return Parts(
        step_time_us=step,
        compute_us=compute.total,
        exposed_comm_us=exposed_comm.total,
        exposed_memory_us=exposed_memory.total,
        other_us=exposed_other.total,
        idle_us=step - busy,
        comm_us=comm_us,
        memory_us=memory.total,
        overlap_pct=100.0 * hidden.total / comm_us if comm_us > 0 else float("nan"),
    )


def _first_by(key: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys, sorted; each key's smallest value): ``groupby(key).min()``, exact."""
    if not len(key):
        return key, values
    order = np.argsort(key, kind="stable")
    keys, at = np.unique(key[order], return_index=True)
    return keys, np.fmin.reduceat(values[order], at)  # (fmin: NaN skipped, as pandas does)


def gpu_step_windows(
    step: np.ndarray, ts: np.ndarray, end: np.ndarray, steps: list[int]
) -> pd.DataFrame:
    """Windows of the GPU steps of one rank (see the module docstring): ``step, start_us,
    end_us``. ``step, ts, end``: the rank's counted GPU rows; ``steps``: its profiler steps.
    A step that launched no kernel gets an empty window where the next one starts."""
    keys, first = _first_by(step, ts)
    last_end = float(np.fmax.reduce(end)) if len(end) else 0.0
    n = len(steps)
    want = np.asarray(steps, dtype=np.int64)
    at = np.searchsorted(keys, want)
    found = at < len(keys)
    found[found] = keys[at[found]] == want[found]
    starts = np.full(n + 1, last_end)  # (the last: for steps with no later kernel)
    starts[:n][found] = first[at[found]]
    # Steps without kernels start where the next step with kernels does (a backward fill).
    nxt = np.minimum.accumulate(np.where(found, np.arange(n), n)[::-1])[::-1]
    filled = starts[nxt]
    filled = np.maximum.accumulate(filled) if n else filled
    ends = np.append(filled[1:], last_end) if n else filled
    ends = np.maximum(ends, filled)
    return pd.DataFrame({"step": steps, "start_us": filled, "end_us": ends})


def step_windows(
    rows: pd.DataFrame, source: ComputeSource, steps: tuple[int, ...], sets: LaneSets
) -> pd.DataFrame:
    """``step, start_us, end_us`` of each counted step of one rank (``rows``: its counted
    rows)."""
    if not steps:
        span = sets.span()
        if span is None and len(rows):
            span = (float(rows["ts_us"].min()), float(rows["end_us"].max()))
        lo, hi = span if span is not None else (0.0, 0.0)
        return pd.DataFrame({"step": [-1], "start_us": [lo], "end_us": [hi]})
    # The few columns read, of the rows read: not a copy of every column of the rows.
    step = rows["step"].to_numpy()
    if source is ComputeSource.GPU_KERNELS:
        gpu = rows["on_gpu"].to_numpy() & (step >= 0)
        ts, end = rows["ts_us"].to_numpy()[gpu], rows["end_us"].to_numpy()[gpu]
        return gpu_step_windows(step[gpu], ts, end, list(steps))
    marks = _columns(rows, (rows["lane"] == Lane.STEP.value).to_numpy()).groupby("step")
    win = pd.DataFrame({"start_us": marks["ts_us"].min(), "end_us": marks["end_us"].max()})
    return win.reindex(list(steps)).dropna().reset_index()


def _columns(rows: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """``step, ts_us, end_us`` of the rows in ``mask``."""
    return pd.DataFrame(
        {c: rows[c].to_numpy()[mask] for c in ("step", "ts_us", "end_us")}, copy=False
    )
