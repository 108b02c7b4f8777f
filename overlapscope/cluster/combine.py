"""The client's share of ``--dask``: the cross-rank analysis from the per-rank tables.

:func:`combine` does what :func:`overlapscope.analysis.api.analyze` does after its per-rank
functions: collectives matched across ranks (group, step, sequence), stragglers, the overlap
bound, the findings; with the clock offsets estimated on the client from the collectives'
ends and the critical path assembled from the per-step tasks. It reads the per-rank tables
only, never an event.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from overlapscope.analysis.api import RunAnalysis, ranked_findings, run_summary
from overlapscope.analysis.bound import bound_summary, bound_table
from overlapscope.analysis.clocks import clock_error
from overlapscope.analysis.collectives import collective_tables
from overlapscope.analysis.comm_causes import join_pieces, rank_parts, split_exposure, unit_parts
from overlapscope.analysis.critical_path import LINK_COLUMNS, STEP_COLUMNS, CriticalPath
from overlapscope.analysis.host_path import with_host
from overlapscope.analysis.idle import empty_gaps, join
from overlapscope.cluster.cache import read_table
from overlapscope.cluster.tasks import (
    GAPS_FILE,
    SMALL_TABLES,
    SPARSE_TABLES,
    TIMELINE_FILE,
    rank_timeline,
    read_summary,
)
from overlapscope.trace.loader import RunTraces


@dataclass(frozen=True, slots=True)
class Clocks:
    """The clock estimate as ``analyze`` keeps it: offsets, applied or not, shared host."""

    offsets: pd.DataFrame
    applied: bool
    shared_host: str | None


def join_paths(parts: Sequence[CriticalPath]) -> CriticalPath:
    """Per-step critical paths (steps in order) as :func:`critical_path` gives the run's."""
    found = [p for p in parts if len(p.steps)]
    if not found:
        return CriticalPath.empty()
    links = pd.DataFrame(
        {c: np.concatenate([p.links[c].to_numpy() for p in found]) for c in LINK_COLUMNS}
    )
    records = [r for p in found for r in p.steps.to_dict("records")]
    return CriticalPath(links, pd.DataFrame.from_records(records, columns=STEP_COLUMNS))


# Joined otherwise than one after the other (sparse tables; the pieces, counted over ranks).
SKIPPED = (*SPARSE_TABLES, "pieces")


def _concat(root: Path, folders: Sequence[str]) -> dict[str, pd.DataFrame]:
    """Each small table of every rank, concatenated in rank order (the pieces of the
    collectives counted over every rank's collectives, as the local analysis counts them)."""
    parts: dict[str, list[pd.DataFrame]] = {n: [] for n in SMALL_TABLES}
    for f in folders:
        tables = read_summary(root / f)["tables"]
        for n in SMALL_TABLES:
            parts[n].append(tables[n])
    out = {n: pd.concat(parts[n], ignore_index=True) for n in SMALL_TABLES if n not in SKIPPED}
    out |= {n: join(parts[n], parts[n][0].iloc[:0].copy) for n in SPARSE_TABLES}
    num = [len(c) for c in parts["comm"]]
    out["pieces"] = join_pieces(list(zip(parts["pieces"], num, strict=True)))
    return out


def _gaps(root: Path, folders: Sequence[str]) -> pd.DataFrame:
    """Every rank's idle gaps (GPU ranks': a CPU rank's table has no row), as the local
    analysis joins them."""
    return join([read_table(root / f / GAPS_FILE) for f in folders], empty_gaps)


def _timeline(root: Path, folders: Sequence[str]) -> pd.DataFrame:
    frames = [read_table(root / f / TIMELINE_FILE) for f in folders]
    return pd.concat(frames, ignore_index=True)


def empty_timeline(run: RunTraces) -> pd.DataFrame:
    """The timeline's columns and dtypes, no rows (the report does not read it), from the
    run's event columns (``run.events``: none of its rows are read)."""
    return rank_timeline(dataclasses.replace(run, events=run.events.iloc[:0]))


def combine(
    run: RunTraces,
    root: Path,
    folders: Sequence[str],
    clocks: Clocks,
    path: CriticalPath,
    *,
    timeline: bool,
) -> RunAnalysis:
    """``analyze(load_run(...))`` from the per-rank tables in ``root/<folder>`` (one folder per
    rank of ``run.ranks``, in order). ``run``: the loaded run without events, its warnings
    those of the loader and the clock alignment. ``timeline=False``: an empty timeline and
    no idle gaps (they grow with the traces; only ``--csv`` writes them)."""
    t = _concat(root, folders)
    tl = _timeline(root, folders) if timeline else empty_timeline(run)
    path = with_host(path, t["host_gaps"])
    comm = split_exposure(t["comm"], t["pieces"])
    units = unit_parts(t["units"], comm, t["ranks"])
    ranks = rank_parts(t["ranks"], comm)
    error = clock_error(clocks.offsets)
    collectives, collective_ranks = collective_tables(comm, run.world_size, error)
    bound = bound_table(units, t["compute"], ranks)
    tables = {"ranks": ranks, "steps": t["steps"], "units": units, "collectives": collectives}
    tables["host_ops"] = t["host_ops"]
    return RunAnalysis(
        summary=run_summary(run),
        ranks=ranks,
        steps=t["steps"],
        units=units,
        collectives=collectives,
        collective_ranks=collective_ranks,
        bound=bound,
        bound_summary=bound_summary(bound),
        findings=ranked_findings(run, tables, path),
        timeline=tl,
        exposed=t["exposed"],
        levers=t["levers"],
        idle_gaps=_gaps(root, folders) if timeline else empty_gaps(),
        host_ops=t["host_ops"],
        idle_streams=t["idle_streams"],
        counted_steps={r.rank: r.steps for r in run.ranks},
        warnings=run.warnings,
        clocks=clocks.offsets,
        clocks_applied=clocks.applied,
        clocks_shared_host=clocks.shared_host,
        path=path,
    )
