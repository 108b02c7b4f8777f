"""From an analysis to the parts of the file: what each rank's part needs of the analysis'
tables (:class:`~overlapscope.perfetto.part.RankPart`), and the run's own part (the header,
the findings of the whole run).

Everything here reads the analysis' tables (small: per collective, per link, per finding),
never the events; the events of each rank are read by its part, from its source file.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from overlapscope import __version__
from overlapscope.analysis.api import RunAnalysis
from overlapscope.analysis.clocks.alignment import offset_at
from overlapscope.analysis.critical_path.path import CriticalPath
from overlapscope.perfetto import path as path_track
from overlapscope.perfetto.part import RankPart, RankTables
from overlapscope.perfetto.select import Selection, choose, step_spans
from overlapscope.perfetto.source import Clock
from overlapscope.phases import Lane
from overlapscope.trace.read.merged import EPOCH_ARG, FORMAT_VERSION
from overlapscope.trace.run.loader import RankInfo

ESTIMATE = ("reference_rank", "offset_us", "stderr_us", "spread_us", "drift_ppm", "center_us")
WAIT_FIGURES = ["straggler_rank", "straggler_lag_us", "transfer_us", "kind", "unit", "phase"]
KEY = ["group", "step", "seq"]


@dataclass(frozen=True, slots=True)
class Plan:
    """The file of one analysis: its header (``overlapscope_export``), the findings of the
    whole run, the selection, the path's hops, and what is left out of it (warnings)."""

    header: dict[str, Any]
    marks: pd.DataFrame  # every finding's marks (finding_marks); rank -1: the run's
    selection: Selection
    hops: pd.DataFrame
    warnings: tuple[str, ...]


def epoch_ns(info: RankInfo) -> int:
    """The run's time 0 in ns: a rank's ``baseTimeNanoseconds`` plus where its file's own
    time stands at the run's 0 (the loader's ``raw_ts_offset_us``)."""
    return int(info.base_time_ns or 0) + round(info.raw_ts_offset_us * 1000.0)


IDLE_GAPS = "idle_gaps"  # the analysis' figure of GPU idle gaps by cause (issue 30)


def idle_gaps(analysis: RunAnalysis) -> pd.DataFrame | None:
    """The GPU idle gaps with their cause (``rank, step, start_us, end_us, cause``...),
    where the analysis has them: a field of that name, or a registered figure in its
    ``tables``; None where it has none (the file then has no idle track)."""
    gaps = getattr(analysis, IDLE_GAPS, None)
    if gaps is None:
        gaps = analysis.tables.get(IDLE_GAPS)
    return gaps if isinstance(gaps, pd.DataFrame) else None


def make_plan(
    analysis: RunAnalysis,
    infos: tuple[RankInfo, ...],
    steps: tuple[int, ...] | None,
    ranks: tuple[int, ...] | None,
) -> Plan:
    path = analysis.path or CriticalPath.empty()
    spans = step_spans(analysis.steps, path.steps)
    selection = choose(spans, [i.rank for i in infos], steps, ranks)
    links = path.links
    if selection.steps is not None:
        links = links[links["step"].isin(selection.steps)]
    hops, short = path_track.hops(links)
    shown = [i.rank for i in infos if selection.has_rank(i.rank)]
    header = {
        "format_version": FORMAT_VERSION,
        "tool": f"overlapscope {__version__}",
        EPOCH_ARG: epoch_ns(infos[0]),
        "world_size": analysis.summary.world_size,
        "ranks": shown,
        "steps": None if selection.steps is None else list(selection.steps),
        "clocks_applied": analysis.clocks_applied,
    }
    marks = finding_marks(analysis, spans, selection)
    warnings = (f"{short} hops of the critical path drawn without an arrow (a link under 1 ns)",)
    return Plan(header, marks, selection, hops, warnings if short else ())


def finding_marks(analysis: RunAnalysis, spans: pd.DataFrame, selection: Selection) -> pd.DataFrame:
    """One mark per finding and step it concerns: the steps it names (``steps``, where a
    finding has them), else every counted step of its rank (of the run: rank -1), at the
    step's start; its text in the args."""
    start = dict(zip(spans["step"].tolist(), spans["start_us"].tolist(), strict=True))
    records = []
    for f in analysis.findings:
        rank = -1 if f.rank is None else int(f.rank)
        named = getattr(f, "steps", None)
        if named:
            concerned = set(named)
        elif rank >= 0:
            concerned = set(analysis.counted_steps.get(rank, ()))
        else:
            concerned = {s for ss in analysis.counted_steps.values() for s in ss}
        for step in sorted(s for s in concerned if selection.has_step(s) and s in start):
            mark = {**f.to_dict(), "change": f.change, "rank": rank, "step": step}
            records.append({**mark, "ts_us": start[step]})
    columns = ["kind", "stake_us", "title", "summary", "change", "cause", "rank", "step", "ts_us"]
    return pd.DataFrame.from_records(records, columns=columns)


def _estimate(clocks: pd.DataFrame | None, rank: int) -> dict[str, Any]:
    if clocks is None or not len(clocks):
        return {}
    row = clocks[clocks["rank"] == rank]
    if not len(row):
        return {}
    record = row.iloc[0].to_dict()
    out: dict[str, Any] = {k: record.get(k) for k in ESTIMATE}
    out["aligned"] = bool(record.get("aligned", False))
    out["num_collectives"] = int(record.get("num_collectives", 0))
    out["reference_rank"] = int(record["reference_rank"])
    return out


def clock_of(info: RankInfo, estimate: dict[str, Any]) -> Clock:
    """The rank's file time to the analysis' aligned time."""
    applied = bool(estimate.get("aligned", False))

    def num(key: str) -> float:
        value = estimate.get(key)
        return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0

    return Clock(
        info.raw_ts_offset_us, num("offset_us"), num("drift_ppm"), num("center_us"), applied
    )


def _waits(analysis: RunAnalysis) -> pd.DataFrame:
    """``collective_ranks`` with each collective's straggler, lag and transfer time."""
    per_rank = analysis.collective_ranks
    figures = analysis.collectives[[*KEY, *WAIT_FIGURES]]
    if not len(per_rank):
        return per_rank.assign(**{c: pd.Series(dtype=object) for c in WAIT_FIGURES})
    return per_rank.merge(figures, on=KEY, how="left")


def _rows(table: pd.DataFrame, rank: int) -> pd.DataFrame:
    return table[table["rank"].to_numpy() == rank].reset_index(drop=True)


def _of(table: pd.DataFrame | None, rank: int) -> pd.DataFrame | None:
    return None if table is None else _rows(table, rank)


def rank_parts(
    analysis: RunAnalysis,
    infos: tuple[RankInfo, ...],
    plan: Plan,
    comm: pd.DataFrame | None,
) -> Iterator[RankPart]:
    """The part of each rank in the file, by rank. ``comm``: every rank's transfers on the
    aligned clock (None: each part's task reads its rank's, with its exposed intervals)."""
    waits = _waits(analysis)
    path = analysis.path or CriticalPath.empty()
    links = path.links
    if plan.selection.steps is not None:
        links = links[links["step"].isin(plan.selection.steps)]
    marks = plan.marks
    for info in sorted(infos, key=lambda i: i.rank):
        if not plan.selection.has_rank(info.rank):
            continue
        r = info.rank
        estimate = _estimate(analysis.clocks, r)
        tables = RankTables(
            comm=_of(comm, r),
            exposed=None if comm is None else _of(analysis.exposed, r),
            waits=_rows(waits, r),
            idle=_of(idle_gaps(analysis), r),
            links=_rows(links, r),
            hops=path_track.of_rank(plan.hops, r),
            findings=_rows(marks, r),
        )
        clock = clock_of(info, estimate)
        world = analysis.summary.world_size
        yield RankPart(r, world, info.path, clock, estimate, plan.selection, tables)


def aligned_comm(events: pd.DataFrame, clocks: pd.DataFrame | None) -> pd.DataFrame:
    """Every rank's transfers (the ``comm`` lane) from the loader's event table, moved onto
    the analysis' aligned clock: ``rank, ts_us, end_us`` and the labels."""
    rows = events[(events["lane"] == Lane.COMM.value).to_numpy()]
    columns = ["rank", "ts_us", "end_us", "phase", "unit", "kind", "group", "step", "seq", "bytes"]
    out = pd.DataFrame({c: rows[c].to_numpy() for c in columns})
    if clocks is not None and len(out):
        shift = offset_at(clocks, out["rank"].to_numpy(), out["ts_us"].to_numpy())
        out["ts_us"] = out["ts_us"].to_numpy() - shift
        out["end_us"] = out["end_us"].to_numpy() - shift
    out["bytes"] = out["bytes"].where(out["bytes"].to_numpy(np.int64) >= 0)
    return out
