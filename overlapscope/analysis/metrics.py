"""Per-rank, per-step, per-unit and timeline tables from the event table (pure functions).

Definitions (all times in µs, over the counted steps of each rank):

* ``comm_us``: length of the union of the rank's communication intervals (NCCL kernels on GPU,
  gloo ops on CPU); ``compute_us`` the same for compute (see ``lane`` in the schema).
* ``exposed_comm_us``: length of ``comm - compute``: communication while no compute runs.
* ``overlap_pct``: ``100 * |comm ∩ compute| / |comm|`` (HTA's definition); NaN without comm.
* ``nccl_wait_us``: time compute is blocked on a collective. CPU overlapscope runs: the union
  of the ``ovs/<comm>.wait`` ranges. Other CPU runs (torch FSDP on gloo, where collectives are
  synchronous): the exposed communication. GPU: compute-idle gaps that end within
  :data:`WAIT_END_TOLERANCE_US` of a communication kernel's end, counted while that
  communication runs.
* ``idle_us``: step time not covered by compute, communication or memory copies.
* ``limiter_us``: time held back by the all-gather rate limiter (``ovs/limiter``, FSDP1
  ``rate_limiter``); not part of ``nccl_wait_us``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.analysis.intervals import (
    Intervals,
    clip,
    covered,
    gaps,
    intersect,
    subtract,
    union,
    union_of,
)
from overlapscope.trace.loader import RunTraces
from overlapscope.trace.names import Phase
from overlapscope.trace.recognize import ComputeSource
from overlapscope.trace.schema import EventLane

# A GPU compute gap that ends this soon after a collective ends is waiting for it (HTA calls
# gaps under 30 µs "kernel wait": launch latency).
WAIT_END_TOLERANCE_US = 30.0
TIMELINE_LANES = (
    EventLane.COMPUTE.value,
    EventLane.COMM.value,
    EventLane.WAIT.value,
    EventLane.MEMORY.value,
)


def counted_mask(run: RunTraces) -> pd.Series:
    """Rows that count: inside a profiler step, or every row of a rank without steps."""
    ev = run.events
    no_steps = [i.rank for i in run.ranks if not i.steps]
    return (ev["step"] >= 0) | ev["rank"].isin(no_steps)


@dataclass(frozen=True, slots=True)
class _Sets:
    compute: Intervals
    comm: Intervals
    memory: Intervals
    wait: Intervals
    limiter: Intervals


def _sets(rows: pd.DataFrame) -> _Sets:
    lane = rows["lane"].to_numpy()
    s = rows["ts_us"].to_numpy()
    e = rows["end_us"].to_numpy()
    phase = rows["phase"].astype(object).to_numpy()
    limiter = phase == Phase.LIMITER.value

    def pick(mask: np.ndarray) -> Intervals:
        return union(s[mask], e[mask])

    return _Sets(
        compute=pick(lane == EventLane.COMPUTE.value),
        comm=pick(lane == EventLane.COMM.value),
        memory=pick(lane == EventLane.MEMORY.value),
        wait=pick((lane == EventLane.WAIT.value) & ~limiter),
        limiter=pick((lane == EventLane.WAIT.value) & limiter),
    )


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


@dataclass(frozen=True, slots=True)
class Figures:
    step_time_us: float
    compute_us: float
    comm_us: float
    exposed_comm_us: float
    overlap_pct: float
    nccl_wait_us: float
    idle_us: float
    memory_us: float
    limiter_us: float


def figures(
    rows: pd.DataFrame, source: ComputeSource, step_time_us: float, window: tuple[float, float]
) -> Figures:
    """All headline figures of one group of rows (a rank, or one step of a rank)."""
    sets = _sets(rows)
    exposed = subtract(sets.comm, sets.compute)
    comm_us = sets.comm.total
    match source:
        case ComputeSource.GPU_KERNELS:
            wait_us = gpu_wait(sets.compute, sets.comm).total
        case ComputeSource.OVS_RANGES:
            wait_us = sets.wait.total
        case ComputeSource.CPU_OPS:
            wait_us = exposed.total
        case _:
            raise ValueError(f"unhandled compute source {source!r}")
    busy = clip(union_of(sets.compute, sets.comm, sets.memory), window[0], window[1])
    return Figures(
        step_time_us=step_time_us,
        compute_us=sets.compute.total,
        comm_us=comm_us,
        exposed_comm_us=exposed.total,
        overlap_pct=100.0 * (comm_us - exposed.total) / comm_us if comm_us > 0 else float("nan"),
        nccl_wait_us=wait_us,
        idle_us=max(0.0, step_time_us - busy.total),
        memory_us=sets.memory.total,
        limiter_us=sets.limiter.total,
    )


def _windows(run: RunTraces, counted: pd.Series) -> pd.DataFrame:
    """One row per (rank, step): the step's window; ranks without steps get step -1 spanning
    all their events."""
    ev = run.events
    steps = ev[ev["lane"] == EventLane.STEP.value]
    win = (
        steps.groupby(["rank", "step"], observed=True)
        .agg(start_us=("ts_us", "min"), end_us=("end_us", "max"))
        .reset_index()
    )
    no_steps = [i.rank for i in run.ranks if not i.steps]
    if no_steps:
        rest = (
            ev[ev["rank"].isin(no_steps) & counted]
            .groupby("rank")
            .agg(start_us=("ts_us", "min"), end_us=("end_us", "max"))
            .reset_index()
            .assign(step=-1)
        )
        win = pd.concat([win, rest[win.columns]], ignore_index=True)
    win["step_time_us"] = win["end_us"] - win["start_us"]
    return win.sort_values(["rank", "step"], ignore_index=True)


def step_table(run: RunTraces, counted: pd.Series) -> pd.DataFrame:
    """Per (rank, step) figures."""
    ev = run.events[counted]
    win = _windows(run, counted)
    sources = {i.rank: i.compute_source for i in run.ranks}
    groups = dict(tuple(ev.groupby(["rank", "step"], observed=True, sort=False)))
    records = []
    for w in win.itertuples(index=False):
        key = (int(w.rank), int(w.step))
        rows = groups.get(key, ev.iloc[:0])
        f = figures(rows, sources[key[0]], float(w.step_time_us), (w.start_us, w.end_us))
        records.append(
            {
                "rank": key[0],
                "step": key[1],
                "start_us": float(w.start_us),
                "end_us": float(w.end_us),
                **_asdict(f),
            }
        )
    return pd.DataFrame.from_records(
        records, columns=["rank", "step", "start_us", "end_us", *Figures.__slots__]
    )


def _asdict(f: Figures) -> dict[str, float]:
    return {k: float(getattr(f, k)) for k in Figures.__slots__}


def rank_table(run: RunTraces, counted: pd.Series, steps: pd.DataFrame) -> pd.DataFrame:
    """Per-rank figures over all counted steps (unions over the whole counted time, so
    collectives running across a step boundary are not split)."""
    ev = run.events[counted]
    records = []
    for info in run.ranks:
        rows = ev[ev["rank"] == info.rank]
        mine = steps[steps["rank"] == info.rank]
        total = float(mine["step_time_us"].sum())
        win = (
            (float(mine["start_us"].min()), float(mine["end_us"].max()))
            if len(mine)
            else (0.0, 0.0)
        )
        f = figures(rows, info.compute_source, total, win)
        # idle over the counted windows only (gaps between steps are not idle)
        f_idle = float(steps.loc[steps["rank"] == info.rank, "idle_us"].sum())
        rec: dict[str, object] = {"rank": info.rank, **_asdict(f)}
        rec["idle_us"] = f_idle
        rec["num_steps"] = len(mine)
        rec["mean_step_time_us"] = total / len(mine) if len(mine) else float("nan")
        rec["framework"] = info.framework.value
        rec["compute_source"] = info.compute_source.value
        records.append(rec)
    cols = [
        "rank",
        "num_steps",
        "step_time_us",
        "mean_step_time_us",
        "compute_us",
        "comm_us",
        "exposed_comm_us",
        "overlap_pct",
        "nccl_wait_us",
        "idle_us",
        "memory_us",
        "limiter_us",
        "framework",
        "compute_source",
    ]
    return pd.DataFrame.from_records(records, columns=cols)


def comm_exposure(run: RunTraces, counted: pd.Series) -> pd.Series:
    """Exposed µs of every counted communication row (its duration minus the part covered by
    the rank's compute), indexed like the event table."""
    ev = run.events[counted]
    out = pd.Series(0.0, index=ev.index[ev["lane"] == EventLane.COMM.value], dtype=np.float64)
    for rank, rows in ev.groupby("rank", sort=False):
        comp = rows[rows["lane"] == EventLane.COMPUTE.value]
        cu = union(comp["ts_us"].to_numpy(), comp["end_us"].to_numpy())
        comm = rows[rows["lane"] == EventLane.COMM.value]
        cov = covered(cu, comm["ts_us"].to_numpy(), comm["end_us"].to_numpy())
        out.loc[comm.index] = comm["dur_us"].to_numpy() - cov
        del rank
    return out


def exposed_intervals(run: RunTraces, counted: pd.Series) -> pd.DataFrame:
    """Exposed-communication intervals per rank: ``rank, start_us, end_us, dur_us``."""
    ev = run.events[counted]
    parts = []
    for rank, rows in ev.groupby("rank", sort=True):
        sets = _sets(rows)
        x = subtract(sets.comm, sets.compute)
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
    return pd.concat(parts, ignore_index=True)


def unit_table(run: RunTraces, counted: pd.Series, exposure: pd.Series) -> pd.DataFrame:
    """Per (rank, unit, phase, kind) of collectives: ``num_ops, comm_us, exposed_us, bytes,
    wait_us`` (wait_us: the ``ovs/<phase>.wait/<unit>`` ranges of CPU runs), plus per-step
    means."""
    ev = run.events[counted]
    comm = ev.loc[exposure.index]
    comm = comm.assign(
        exposed_us=exposure.to_numpy(), known_bytes=comm["bytes"].clip(lower=0).to_numpy()
    )
    keys = ["rank", "unit", "phase", "kind"]
    table = (
        comm.groupby(keys, observed=True, dropna=False)
        .agg(
            num_ops=("dur_us", "size"),
            comm_us=("dur_us", "sum"),
            exposed_us=("exposed_us", "sum"),
            bytes=("known_bytes", "sum"),
        )
        .reset_index()
    )
    waits = ev[(ev["lane"] == EventLane.WAIT.value) & ev["phase"].notna()]
    if len(waits):
        awaited_of = {p.value: (p.awaited.value if p.awaited is not None else None) for p in Phase}
        awaited = waits["phase"].astype(object).map(awaited_of)
        w = (
            waits.assign(phase=awaited.to_numpy())
            .dropna(subset=["phase"])
            .groupby(["rank", "unit", "phase"], observed=True)["dur_us"]
            .sum()
            .rename("wait_us")
            .reset_index()
        )
        table["phase"] = table["phase"].astype(object)
        table["unit"] = table["unit"].astype(object)
        w["unit"] = w["unit"].astype(object)
        table = table.merge(w, on=["rank", "unit", "phase"], how="left")
    else:
        table["wait_us"] = np.nan
    table["wait_us"] = table["wait_us"].fillna(0.0)
    nsteps = {i.rank: max(len(i.steps), 1) for i in run.ranks}
    per = table["rank"].map(nsteps).astype(float)
    table["exposed_us_per_step"] = table["exposed_us"] / per
    table["comm_us_per_step"] = table["comm_us"] / per
    for c in ("unit", "phase", "kind"):
        table[c] = table[c].astype(object).where(table[c].notna(), None)
    return table.sort_values(["rank", "exposed_us"], ascending=[True, False], ignore_index=True)


def compute_by_unit(run: RunTraces, counted: pd.Series) -> pd.DataFrame:
    """Compute µs per (rank, unit) (summed durations of the unit's compute rows)."""
    ev = run.events[counted]
    comp = ev[(ev["lane"] == EventLane.COMPUTE.value)]
    unit = comp["unit"].astype(object).where(comp["unit"].notna(), None)
    out = (
        comp.assign(unit=unit.fillna(""))
        .groupby(["rank", "unit"], observed=True)["dur_us"]
        .sum()
        .rename("compute_us")
        .reset_index()
    )
    return out


def timeline_table(run: RunTraces, counted: pd.Series, exposure: pd.Series) -> pd.DataFrame:
    """Intervals a timeline chart can draw directly: one row per compute / comm / wait /
    memory event of the counted steps."""
    ev = run.events[counted]
    rows = ev[ev["lane"].isin(TIMELINE_LANES)]
    exposed = pd.Series(0.0, index=rows.index)
    common = exposure.index.intersection(rows.index)
    exposed.loc[common] = exposure.loc[common]
    out = pd.DataFrame(
        {
            "rank": rows["rank"].to_numpy(),
            "step": rows["step"].to_numpy(),
            "lane": rows["lane"].astype(str).to_numpy(),
            "phase": rows["phase"],
            "unit": rows["unit"],
            "kind": rows["kind"],
            "name": rows["name"],
            "tid": rows["tid"].to_numpy(),
            "on_gpu": rows["on_gpu"].to_numpy(),
            "start_us": rows["ts_us"].to_numpy(),
            "end_us": rows["end_us"].to_numpy(),
            "dur_us": rows["dur_us"].to_numpy(),
            "bytes": rows["bytes"].to_numpy(),
            "exposed_us": exposed.to_numpy(),
        }
    )
    out["lane"] = pd.Categorical(out["lane"], categories=list(TIMELINE_LANES))
    return out.sort_values(["rank", "start_us"], ignore_index=True)
