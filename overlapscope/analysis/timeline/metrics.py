"""Per-rank, per-step, per-unit and timeline tables from the event table (pure functions).

Definitions (all times in µs, over the counted steps of each rank):

* The partition of each step (``compute``, ``exposed_comm``, ``exposed_memory``, ``other``,
  ``idle``) and the step windows: :mod:`overlapscope.analysis.timeline.partition`.
* ``comm_us``: length of the union of the rank's communication intervals inside the step
  (NCCL kernels on GPU, gloo ops on CPU).
* ``overlap_pct``: ``100 * |comm ∩ compute| / |comm|`` (HTA's definition); NaN without comm.
* ``nccl_wait_us``: time compute is blocked on a collective. CPU overlapscope runs: the union
  of the ``ovs/<comm>.wait`` ranges. Other CPU runs (torch FSDP on gloo, where collectives are
  synchronous): the exposed communication. GPU: compute-idle gaps that end within
  :data:`WAIT_END_TOLERANCE_US` of a communication kernel's end, counted while that
  communication runs.
* ``limiter_us``: time held back by the all-gather rate limiter (``ovs/limiter``, FSDP1
  ``rate_limiter``); not part of ``nccl_wait_us``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from overlapscope.analysis.fields import PER_STEP, TOTAL
from overlapscope.analysis.intervals import (
    Intervals,
    clip,
    covered,
    gaps,
    intersect,
    subtract,
    union,
)
from overlapscope.analysis.timeline.partition import LaneSets, Parts, partition, step_windows
from overlapscope.phases import Lane
from overlapscope.trace.recognize.table import ComputeSource
from overlapscope.trace.run.loader import RankInfo, RunTraces

# A GPU compute gap that ends this soon after a collective ends is waiting for it (HTA calls
# gaps under 30 µs "kernel wait": launch latency).
WAIT_END_TOLERANCE_US = 30.0
TIMELINE_LANES = (
    Lane.COMPUTE.value,
    Lane.COMM.value,
    Lane.WAIT.value,
    Lane.MEMORY.value,
)


def counted_mask(run: RunTraces) -> pd.Series:
    """Rows that count: inside a profiler step, or every row of a rank without steps."""
    ev = run.events
    no_steps = [i.rank for i in run.ranks if not i.steps]
    return (ev["step"] >= 0) | ev["rank"].isin(no_steps)


def counted_rows(run: RunTraces, counted: pd.Series) -> pd.DataFrame:
    """The counted rows of the event table: the table itself when every row counts (a row
    selection copies every column; each table function starts with one)."""
    return run.events if bool(counted.all()) else run.events[counted]


def by_rank(ev: pd.DataFrame, sort: bool = True) -> list[tuple[int, pd.DataFrame]]:
    """``ev.groupby("rank")``'s groups; the table itself, not a copy of it, when it holds one
    rank (a rank's own task, a one-rank run)."""
    ranks = ev["rank"].to_numpy()
    if len(ranks) and bool((ranks == ranks[0]).all()):
        return [(int(ranks[0]), ev)]
    return [(int(rank), rows) for rank, rows in ev.groupby("rank", sort=sort)]


def distinct_ranks(rank: np.ndarray) -> list[int]:
    """``np.unique(rank)`` as ints; without hashing every row when they hold one rank (a
    rank's own task, a one-rank run)."""
    if len(rank) and bool((rank == rank[0]).all()):
        return [int(rank[0])]
    return [int(r) for r in np.unique(rank).tolist()]


def gpu_wait(
    compute: Intervals, comm: Intervals, tolerance_us: float = WAIT_END_TOLERANCE_US
) -> Intervals:
    """Compute-idle time that ends when a collective completes (see module docstring)."""
    if len(comm) == 0:
        return Intervals.empty()
    lo = float(min(comm.starts[0], compute.starts[0] if len(compute) else comm.starts[0]))
    hi = float(max(comm.ends[-1], compute.ends[-1] if len(compute) else comm.ends[-1]))
    idle = gaps(compute, lo, hi)
    # The last collective to finish at or before the end of each gap.
    j = np.searchsorted(comm.ends, idle.ends, side="right") - 1
    ok = j >= 0
    jj = np.maximum(j, 0)
    ends_soon = ok & (idle.ends - comm.ends[jj] <= tolerance_us) & (comm.ends[jj] > idle.starts)
    # Gaps left open at the end (nothing resumes) are not waits.
    ends_soon &= idle.ends < hi
    waiting = Intervals(idle.starts[ends_soon], idle.ends[ends_soon])
    return intersect(waiting, comm)


# Columns of the steps table after rank, step, start_us, end_us (each: that step's figure).
STEP_FIGURES = (
    "step_time_us",
    "compute_us",
    "exposed_comm_us",
    "exposed_memory_us",
    "other_us",
    "idle_us",
    "comm_us",
    "memory_us",
    "overlap_pct",
    "nccl_wait_us",
    "limiter_us",
)


def _waits(sets: LaneSets, source: ComputeSource, lo: float, hi: float) -> tuple[float, float]:
    """(nccl_wait_us, limiter_us) inside ``[lo, hi)``."""
    compute = clip(sets.compute, lo, hi)
    comm = clip(sets.comm, lo, hi)
    match source:
        case ComputeSource.GPU_KERNELS:
            wait_us = gpu_wait(compute, comm).total
        case ComputeSource.OVS_RANGES:
            wait_us = clip(sets.wait, lo, hi).total
        case ComputeSource.CPU_OPS:
            wait_us = subtract(comm, compute).total
        case _:
            raise ValueError(f"unhandled compute source {source!r}")
    return wait_us, clip(sets.limiter, lo, hi).total


# Each rank's lane sets of its counted rows (:func:`lane_sets`), by rank.
RankSets = dict[int, LaneSets]


def lane_sets(run: RunTraces, counted: pd.Series) -> RankSets:
    """Each rank's :class:`LaneSets` of its counted rows, built once for the tables that
    read them (steps, ranks, exposed intervals)."""
    ev = counted_rows(run, counted)
    groups = dict(by_rank(ev, sort=False))
    return {
        i.rank: LaneSets.of(groups.get(i.rank, ev.iloc[:0]), i.compute_source) for i in run.ranks
    }


def rank_steps(rows: pd.DataFrame, info: RankInfo, sets: LaneSets | None = None) -> pd.DataFrame:
    """The steps table of one rank (``rows``: its counted rows; ``sets``: their lane sets,
    built here when not given)."""
    sets = LaneSets.of(rows, info.compute_source) if sets is None else sets
    win = step_windows(rows, info.compute_source, info.steps, sets)
    records = []
    for step, lo, hi in zip(win["step"], win["start_us"], win["end_us"], strict=True):
        parts = partition(sets, float(lo), float(hi))
        wait_us, limiter_us = _waits(sets, info.compute_source, float(lo), float(hi))
        rec = {"rank": info.rank, "step": int(step), "start_us": float(lo), "end_us": float(hi)}
        rec.update({k: float(getattr(parts, k)) for k in Parts.__slots__})
        rec.update(nccl_wait_us=wait_us, limiter_us=limiter_us)
        records.append(rec)
    return pd.DataFrame.from_records(
        records, columns=["rank", "step", "start_us", "end_us", *STEP_FIGURES]
    )


def step_table(run: RunTraces, counted: pd.Series, sets: RankSets | None = None) -> pd.DataFrame:
    """Per (rank, step) partition and figures (see :mod:`overlapscope.analysis.timeline.partition`);
    ``sets``: :func:`lane_sets` of the run, built here when not given."""
    ev = counted_rows(run, counted)
    groups = dict(by_rank(ev, sort=False))
    sets = lane_sets(run, counted) if sets is None else sets
    tables = [rank_steps(groups.get(i.rank, ev.iloc[:0]), i, sets[i.rank]) for i in run.ranks]
    if not tables:
        return pd.DataFrame(columns=["rank", "step", "start_us", "end_us", *STEP_FIGURES])
    # (one rank's table is not copied into a concatenation first)
    whole = tables[0] if len(tables) == 1 else pd.concat(tables, ignore_index=True)
    return whole.sort_values(["rank", "step"], ignore_index=True)


# Figures of the ranks table given as a total over counted steps and a mean per step.
SUMMED = (
    "step_time",
    "compute",
    "exposed_comm",
    "exposed_memory",
    "other",
    "idle",
    "comm",
    "memory",
    "nccl_wait",
    "limiter",
)
RANK_COLUMNS = [
    "rank",
    "num_steps",
    *(f"{f}{suffix}" for f in SUMMED for suffix in (TOTAL, PER_STEP)),
    "overlap_pct",
    "framework",
    "compute_source",
    "num_unlaunched",
]


def rank_table(
    run: RunTraces, counted: pd.Series, steps: pd.DataFrame, sets: RankSets | None = None
) -> pd.DataFrame:
    """Per-rank figures: each part's total over the counted steps and mean per step; the
    overlap % over the rank's whole counted time (HTA's per-rank figure). ``sets``:
    :func:`lane_sets` of the run, built here when not given."""
    grouped = steps.groupby("rank")
    sums = grouped[[f"{f}_us" for f in SUMMED]].sum()
    # each rank's sums and count as Python values, read once (not a .loc per figure)
    summed = dict(zip(sums.index.tolist(), sums.to_numpy(dtype=np.float64).tolist(), strict=True))
    size = grouped.size()
    counts = dict(zip(size.index.tolist(), size.tolist(), strict=True))
    records = []
    sets_of = lane_sets(run, counted) if sets is None else sets
    for info in run.ranks:
        mine = sets_of[info.rank]
        comm = mine.comm.total
        hidden = intersect(mine.comm, mine.compute).total
        n = int(counts.get(info.rank, 0))
        rec: dict[str, object] = {"rank": info.rank, "num_steps": n}
        for i, f in enumerate(SUMMED):
            total = float(summed[info.rank][i]) if n else 0.0
            rec[f"{f}{TOTAL}"] = total
            rec[f"{f}{PER_STEP}"] = total / n if n else float("nan")
        rec["overlap_pct"] = 100.0 * hidden / comm if comm > 0 else float("nan")
        rec["framework"] = info.framework
        rec["compute_source"] = info.compute_source.value
        rec["num_unlaunched"] = info.num_unlaunched
        records.append(rec)
    return pd.DataFrame.from_records(records, columns=RANK_COLUMNS)


def comm_exposure(run: RunTraces, counted: pd.Series) -> pd.Series:
    """Exposed µs of every counted communication row (its duration minus the part covered by
    the rank's compute), indexed like the event table."""
    ev = counted_rows(run, counted)
    lane = ev["lane"]
    is_comm = (lane == Lane.COMM.value).to_numpy()
    is_comp = (lane == Lane.COMPUTE.value).to_numpy()
    # The columns read, as arrays: no copy of every column of the compute and comm rows.
    rank, ts, end = (ev[c].to_numpy() for c in ("rank", "ts_us", "end_us"))
    comm_rank, exposed = rank[is_comm], np.zeros(int(is_comm.sum()), dtype=np.float64)
    for r in distinct_ranks(comm_rank):  # (a rank without comm rows has nothing to set)
        mine = rank == r
        comp, comm = mine & is_comp, mine & is_comm
        cu = union(ts[comp], end[comp])
        cov = covered(cu, ts[comm], end[comm])
        exposed[comm_rank == r] = ev["dur_us"].to_numpy()[comm] - cov
    return pd.Series(exposed, index=ev.index[is_comm], dtype=np.float64)


def exposed_intervals(
    run: RunTraces, counted: pd.Series, steps: pd.DataFrame, sets: RankSets | None = None
) -> pd.DataFrame:
    """Exposed-communication intervals per rank, inside its steps: ``rank, start_us, end_us,
    dur_us``; ``sets``: :func:`lane_sets` of the run, built here when not given."""
    ev = counted_rows(run, counted)
    parts = []
    sets_of = lane_sets(run, counted) if sets is None else sets
    for rank in distinct_ranks(ev["rank"].to_numpy()):  # (by_rank's ranks, in order)
        busy = sets_of[rank]
        mine = steps[steps["rank"] == rank]
        inside = union(mine["start_us"].to_numpy(), mine["end_us"].to_numpy())
        x = intersect(subtract(busy.comm, busy.compute), inside)
        parts.append(
            pd.DataFrame(
                {
                    "rank": np.int32(rank),
                    "start_us": x.starts,
                    "end_us": x.ends,
                    "dur_us": x.ends - x.starts,
                }
            )
        )
    if not parts:
        return pd.DataFrame(columns=["rank", "start_us", "end_us", "dur_us"])
    return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)


LABELS = ("phase", "unit", "kind", "name")


def take_columns(ev: pd.DataFrame, at: np.ndarray, columns: Sequence[str]) -> dict[str, Any]:
    """``columns`` of the rows at positions ``at``, in that order, each as an array of its
    dtype (categoricals keep theirs): what ``ev.iloc[at][columns]`` holds, without a copy
    of the other columns or an index."""
    taken: dict[str, Any] = {}
    for c in columns:
        column = ev[c]
        if isinstance(column.dtype, pd.CategoricalDtype):
            taken[c] = column.array.take(at)
        else:
            taken[c] = column.to_numpy()[at]
    return taken


def timeline_table(run: RunTraces, counted: pd.Series, exposure: pd.Series) -> pd.DataFrame:
    """Intervals a timeline chart can draw directly: one row per compute / comm / wait /
    memory event of the counted steps, by rank then start (``exposed_us``: ``exposure``'s,
    0 for the rows not in it).

    Built from the drawable rows' positions in their final order, each column taken once
    from the table (a row selection, then a sort, copied every column twice: ~3 ms of a
    reduce task's ~30 ms of tables, measured)."""
    ev = counted_rows(run, counted)
    lanes = _timeline_lanes(ev["lane"])
    drawable = np.flatnonzero(lanes.codes >= 0)
    rank, start = ev["rank"].to_numpy(), ev["ts_us"].to_numpy()
    # sort_values(["rank", "start_us"])'s order: a stable sort by rank then start, NaN last
    at = drawable[np.lexsort((start[drawable], rank[drawable]))]
    exposed = np.zeros(len(ev), dtype=np.float64)
    where = ev.index.get_indexer(exposure.index)
    exposed[where[where >= 0]] = exposure.to_numpy()[where >= 0]

    taken = take_columns(ev, at, ("step", *LABELS, "tid", "on_gpu", "end_us", "dur_us", "bytes"))
    columns = {"rank": rank[at], "step": taken["step"], "lane": lanes.take(at)}
    columns |= {c: taken[c] for c in (*LABELS, "tid", "on_gpu")}
    columns |= {"start_us": start[at], "end_us": taken["end_us"], "dur_us": taken["dur_us"]}
    columns |= {"bytes": taken["bytes"], "exposed_us": exposed[at]}
    return pd.DataFrame(columns)


def _timeline_lanes(lane: pd.Series) -> pd.Categorical:
    """The lanes as a categorical of :data:`TIMELINE_LANES`, re-coded from the codes (not
    through a column of strings hashed again)."""
    cats = list(TIMELINE_LANES)
    position = [cats.index(c) if c in cats else -1 for c in lane.cat.categories]
    codes = lane.cat.codes.to_numpy()
    lookup = np.asarray([*position, -1], dtype=np.int64)  # code -1 (missing) stays -1
    return pd.Categorical.from_codes(lookup[codes], categories=cats)
