"""What the analysis computes, in one list: the per-rank figures (the map) and the cross-rank
ones (the combine). Every executor runs exactly these: :func:`overlapscope.analysis.api.
analyze` in this process on a loaded run, ``overlapscope analyze`` on a local pool or on Dask
through the per-rank cache (``overlapscope/pipeline``).

The analysis of a run is::

    per rank      RankView(one rank's events) -> every RANK_FIGURES table   (map: a task each)
    cross-rank    the per-rank tables, concatenated in rank order
                  -> every RUN_FIGURES table, the critical path, bound summary, findings

To add a figure:

* **per rank** (it reads one rank's rows only): write ``f(view: RankView) -> pd.DataFrame``
  (``view.run`` is a one-rank run of its counted rows, ``view.counted`` their mask,
  ``view.table(name)`` any figure above it in the list, made once) and append
  ``RankFigure("name", f)`` to :data:`RANK_FIGURES`, with ``size=Size.EVENTS`` when it grows
  with the events (it is stored beside the rank's summary instead of in it) or
  ``Size.ON_DEMAND`` when it should be made only when asked for (the timeline).
* **cross-rank**: write ``f(tables, run) -> tuple of frames`` (``tables``: every per-rank
  figure over all ranks, and the cross-rank ones above it; ``run``: the loaded run without
  events) and append ``RunFigure(("name", ...), f)`` to :data:`RUN_FIGURES`.

The figure then reaches every output by its name: ``RunAnalysis.<name>`` where the analysis
has a field of that name, else ``RunAnalysis.tables[name]``, which the JSON report carries
under ``tables`` and ``--csv`` writes as ``<name>.csv``. ``output=False`` keeps a figure an
input of others only. A new per-rank figure costs a ``--dask`` run nothing on the client: it
travels in the rank's summary.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from overlapscope.analysis.clocks.alignment import clock_error
from overlapscope.analysis.collectives.tables import collective_tables
from overlapscope.analysis.framework import rank_marks
from overlapscope.analysis.host.phase_work import PHASE_WORK_COLUMNS, rank_phase_work
from overlapscope.analysis.host.step_boundary import BOUNDARY_COLUMNS, rank_boundaries
from overlapscope.analysis.host.syncs import SYNC_COLUMNS, rank_syncs
from overlapscope.analysis.timeline.bound import bound_table
from overlapscope.analysis.timeline.levers import lever_table
from overlapscope.analysis.timeline.metrics import (
    RankSets,
    comm_exposure,
    counted_mask,
    exposed_intervals,
    lane_sets,
    rank_table,
    step_table,
    take_columns,
    timeline_table,
)
from overlapscope.analysis.timeline.partition import any_of
from overlapscope.analysis.timeline.units import compute_by_unit, unit_table
from overlapscope.analysis.waiting.comm_causes import rank_parts, split_exposure, unit_parts
from overlapscope.analysis.waiting.idle import rank_idle
from overlapscope.analysis.waiting.tables import WaitTables, wait_tables
from overlapscope.phases import Lane
from overlapscope.trace.run.loader import RunTraces

# The lanes of the critical path's rows: its work and its steps' marks.
PATH_LANES = [Lane.COMPUTE.value, Lane.COMM.value, Lane.WAIT.value, Lane.STEP.value]
PATH_COLUMNS = ["rank", "step", "ts_us", "end_us", "lane", "unit", "phase", "group", "seq"]
COMM_COLUMNS = [  # (exposed_us last: the one not in the event table)
    *("rank", "group", "step", "seq", "kind", "unit", "phase", "bytes"),
    *("ts_us", "end_us", "dur_us", "exposed_us"),
]
PATH = "path"
TIMELINE = "timeline"
IDLE_GAPS = "idle_gaps"
SYNCS = "syncs"  # every blocking host call (host/syncs.py)
BOUNDARIES = "step_boundaries"  # the time around each step's first GPU op (step_boundary.py)
PHASE_WORK = (
    "phase_work"  # each part of a step's op, launch-call and idle time (host/phase_work.py)
)
FRAMEWORK_MARKS = "framework_marks"  # what the trace's names say ran it (framework.py)
# The clock offsets with their uncertainty (analysis/clocks/alignment.py), given to the cross-rank
# figures beside the per-rank ones: a lag within a clock's uncertainty is no straggler.
CLOCKS = "clock_offsets"


class Size(enum.Enum):
    """How a per-rank figure is kept between the map and the combine."""

    SUMMARY = "summary"  # small: in the rank's summary
    EVENTS = "events"  # grows with the events: a file of its own, read when needed
    ON_DEMAND = "on_demand"  # as EVENTS, made only when asked for


class RankView:
    """One rank's counted rows (renumbered: rows are found by label in a range index) and
    its figures, each made once, when first asked for."""

    def __init__(self, run: RunTraces, on_demand: bool = False) -> None:
        counted = counted_mask(run)
        if not counted.all():
            run = dataclasses.replace(run, events=run.events[counted].reset_index(drop=True))
            counted = counted[counted].reset_index(drop=True)
        self.run, self.counted = run, counted
        self._made: dict[str, pd.DataFrame] = {}
        self._sets: RankSets | None = None
        self._exposure: pd.Series | None = None
        self._waits: WaitTables | None = None
        self.on_demand = on_demand

    @property
    def sets(self) -> RankSets:
        """The rank's lanes as interval sets."""
        if self._sets is None:
            self._sets = lane_sets(self.run, self.counted)
        return self._sets

    @property
    def exposure(self) -> pd.Series:
        """Each collective row's exposed µs (indexed by its row)."""
        if self._exposure is None:
            self._exposure = comm_exposure(self.run, self.counted)
        return self._exposure

    @property
    def waits(self) -> WaitTables:
        """Where the rank's GPU waited (analysis/waiting/tables.py), with its every idle gap when
        the
        on-demand figures are made too."""
        if self._waits is None:
            steps = step_table(self.run, self.counted, self.sets)
            self._waits = wait_tables(
                self.run, self.counted, steps, self.sets, self.exposure, self.on_demand
            )
        return self._waits

    def table(self, name: str) -> pd.DataFrame:
        if name not in self._made:
            self._made[name] = RANK_FIGURE[name].make(self)
        return self._made[name]


@dataclass(frozen=True, slots=True)
class RankFigure:
    name: str
    make: Callable[[RankView], pd.DataFrame]
    size: Size = Size.SUMMARY
    output: bool = True  # False: read by cross-rank figures only, not reported


@dataclass(frozen=True, slots=True)
class RunFigure:
    names: tuple[str, ...]
    make: Callable[[Mapping[str, pd.DataFrame], RunTraces], tuple[pd.DataFrame, ...]]


def _steps(v: RankView) -> pd.DataFrame:
    return v.waits.steps  # (the steps table with its idle split by cause)


def _ranks(v: RankView) -> pd.DataFrame:
    steps = v.table("steps")
    return rank_idle(rank_table(v.run, v.counted, steps, v.sets), steps)


def _units(v: RankView) -> pd.DataFrame:
    return unit_table(v.run, v.counted, v.exposure, v.table("ranks"))


def _comm(v: RankView) -> pd.DataFrame:
    """The collectives' rows with their exposure (the rows by position, each column taken
    once: a row selection copies every column of the table first)."""
    ev = v.run.events
    comm = take_columns(ev, ev.index.get_indexer(v.exposure.index), COMM_COLUMNS[:-1])
    return pd.DataFrame({**comm, "exposed_us": v.exposure.to_numpy(), "late": v.waits.late})


def _idle_gaps(v: RankView) -> pd.DataFrame:
    if not v.on_demand:  # (a view made for the summary only: its gaps, made again)
        steps = step_table(v.run, v.counted, v.sets)
        return wait_tables(v.run, v.counted, steps, v.sets, v.exposure, True).gaps
    return v.waits.gaps


def _syncs(v: RankView) -> pd.DataFrame:
    """The rank's blocking host calls (analysis/host/syncs.py)."""
    if not v.run.ranks:
        return pd.DataFrame(columns=SYNC_COLUMNS)
    rank = v.run.ranks[0].rank
    return rank_syncs(v.run.events, rank, v.sets[rank], v.table("steps"), v.waits.host_gaps)


def _boundaries(v: RankView) -> pd.DataFrame:
    """The rank's step boundaries (analysis/host/step_boundary.py)."""
    if not v.run.ranks:
        return pd.DataFrame(columns=BOUNDARY_COLUMNS)
    return rank_boundaries(v.run.events, v.run.ranks[0].rank)


def _phase_work(v: RankView) -> pd.DataFrame:
    """The rank's forward, backward and optimizer in op, launch-call and idle time."""
    if not v.run.ranks:
        return pd.DataFrame(columns=PHASE_WORK_COLUMNS)
    return rank_phase_work(v.run.events, v.run.ranks[0].rank)


def _path_rows(v: RankView) -> pd.DataFrame:
    """The rows the critical path reads: its lanes' rows inside a step."""
    ev = v.run.events
    lane = ev["lane"]
    codes = lane.cat.categories.get_indexer(PATH_LANES)  # (-1: a lane not in the run)
    used = any_of(lane.cat.codes.to_numpy(), [int(c) for c in codes if c >= 0])
    used &= ev["step"].to_numpy() >= 0
    return pd.DataFrame(take_columns(ev, np.flatnonzero(used), PATH_COLUMNS))


RANK_FIGURES: tuple[RankFigure, ...] = (
    RankFigure("steps", _steps),
    RankFigure("ranks", _ranks),
    RankFigure("units", _units),
    RankFigure("comm", _comm, output=False),
    RankFigure("compute", lambda v: compute_by_unit(v.run, v.counted), output=False),
    RankFigure("levers", lambda v: lever_table(v.run, v.counted)),
    RankFigure("exposed", lambda v: exposed_intervals(v.run, v.counted, v.table("steps"), v.sets)),
    RankFigure(PATH, _path_rows, Size.EVENTS, output=False),
    RankFigure("pieces", lambda v: v.waits.pieces, output=False),
    RankFigure("idle_streams", lambda v: v.waits.streams),
    RankFigure("host_ops", lambda v: v.waits.host_ops),
    RankFigure("host_gaps", lambda v: v.waits.host_gaps, output=False),
    RankFigure(SYNCS, _syncs, output=False),
    RankFigure(BOUNDARIES, _boundaries, output=False),
    RankFigure(PHASE_WORK, _phase_work, output=False),
    RankFigure(FRAMEWORK_MARKS, lambda v: rank_marks(v.run), output=False),
    RankFigure(TIMELINE, lambda v: timeline_table(v.run, v.counted, v.exposure), Size.ON_DEMAND),
    RankFigure(IDLE_GAPS, _idle_gaps, Size.ON_DEMAND),
)
RANK_FIGURE = {f.name: f for f in RANK_FIGURES}


def _collectives(t: Mapping[str, pd.DataFrame], run: RunTraces) -> tuple[pd.DataFrame, ...]:
    return collective_tables(t["comm"], run.world_size, clock_error(t.get(CLOCKS)))


def _exposure_parts(t: Mapping[str, pd.DataFrame], _run: RunTraces) -> tuple[pd.DataFrame, ...]:
    """The units' and ranks' exposed communication split by cause (waiting/comm_causes.py), from
    the collectives' (``comm``, split first: it needs the other ranks' durations)."""
    return unit_parts(t["units"], t["comm"], t["ranks"]), rank_parts(t["ranks"], t["comm"])


RUN_FIGURES: tuple[RunFigure, ...] = (
    RunFigure(("comm",), lambda t, _run: (split_exposure(t["comm"], t["pieces"]),)),
    RunFigure(("units", "ranks"), _exposure_parts),
    RunFigure(("collectives", "collective_ranks"), _collectives),
    RunFigure(("bound",), lambda t, _run: (bound_table(t["units"], t["compute"], t["ranks"]),)),
)


def rank_tables(run: RunTraces, sizes: tuple[Size, ...] = tuple(Size)) -> dict[str, pd.DataFrame]:
    """The per-rank figures of a one-rank run, those of ``sizes``; the map of every executor."""
    view = RankView(run, Size.ON_DEMAND in sizes)
    return {f.name: view.table(f.name) for f in RANK_FIGURES if f.size in sizes}


def run_tables(per_rank: Mapping[str, pd.DataFrame], run: RunTraces) -> dict[str, Any]:
    """Every cross-rank figure from the per-rank ones (over all ranks), and those."""
    tables: dict[str, Any] = dict(per_rank)
    for f in RUN_FIGURES:
        tables.update(zip(f.names, f.make(tables, run), strict=True))
    return tables
