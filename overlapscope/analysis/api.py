"""The analysis facade: ``analyze(run) -> RunAnalysis``.

:class:`RunAnalysis` holds every table the CLI and the dashboard show; nothing downstream
re-derives a metric. ``to_json_dict()`` gives the versioned JSON document described in
``docs/ANALYSIS.md``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import pandas as pd

from overlapscope.analysis.bound import bound_summary, bound_table
from overlapscope.analysis.clocks import align_run, clock_error, shared_host
from overlapscope.analysis.collectives import collective_tables
from overlapscope.analysis.comm_causes import rank_parts, split_exposure, unit_parts
from overlapscope.analysis.critical_path import CriticalPath, critical_path
from overlapscope.analysis.findings import Finding, find
from overlapscope.analysis.host_finding import host_findings
from overlapscope.analysis.host_path import with_host
from overlapscope.analysis.hta_report import HtaReport, HtaStatus, round_like_hta, run_hta
from overlapscope.analysis.idle import rank_idle
from overlapscope.analysis.levers import lever_table
from overlapscope.analysis.metrics import (
    comm_exposure,
    counted_mask,
    exposed_intervals,
    lane_sets,
    rank_table,
    step_table,
    timeline_table,
)
from overlapscope.analysis.path_report import path_findings
from overlapscope.analysis.path_report import to_json as clocks_path_json
from overlapscope.analysis.units import compute_by_unit, unit_table
from overlapscope.analysis.waits import wait_tables
from overlapscope.trace.loader import RunTraces

SCHEMA_VERSION = 2


@dataclass(frozen=True, slots=True)
class RunSummary:
    world_size: int
    ranks: tuple[int, ...]
    has_gpu: bool
    frameworks: dict[int, str]
    completed_run: bool
    sources: tuple[str, ...]
    run_config: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class RunAnalysis:
    """Everything ``overlapscope analyze`` reports (see ``docs/ANALYSIS.md`` for columns).

    ranks: one row per rank (totals over counted steps). steps: one row per (rank, step).
    units: per (rank, unit, phase, kind) of collectives. collectives: one row per collective
    matched across ranks; collective_ranks: its per-rank rows. bound: per-rank overlap bound;
    bound_summary: its mean over ranks. timeline: drawable intervals; exposed: exposed
    communication intervals per rank. counted_steps: the profiler steps counted per rank.
    """

    summary: RunSummary
    ranks: pd.DataFrame
    steps: pd.DataFrame
    units: pd.DataFrame
    collectives: pd.DataFrame
    collective_ranks: pd.DataFrame
    bound: pd.DataFrame
    bound_summary: dict[str, float]
    findings: tuple[Finding, ...]
    timeline: pd.DataFrame
    exposed: pd.DataFrame
    levers: pd.DataFrame  # recompute / h2d / d2h per unit (analysis/levers.py)
    idle_gaps: pd.DataFrame  # every GPU idle gap with its cause (analysis/idle.py)
    idle_streams: pd.DataFrame  # per stream, HTA's idle breakdown beside ours (idle.py)
    host_ops: pd.DataFrame  # what the host did while the GPU waited for it (idle.py)
    counted_steps: dict[int, tuple[int, ...]]
    warnings: tuple[str, ...]
    hta: HtaReport | None = None
    clocks: pd.DataFrame | None = None  # per-rank clock offsets (analysis/clocks.py)
    clocks_applied: bool = False
    clocks_shared_host: str | None = None  # every rank on this host: one clock (clocks.py)
    path: CriticalPath | None = None  # critical path per step (analysis/critical_path.py)

    def exposed_intervals(self, rank: int) -> pd.DataFrame:
        """Exposed-communication intervals of one rank: ``start_us, end_us, dur_us``."""
        rows = self.exposed[self.exposed["rank"] == rank]
        return rows[["start_us", "end_us", "dur_us"]].reset_index(drop=True)

    def with_hta(self, report: HtaReport) -> RunAnalysis:
        return dataclasses.replace(self, hta=report)

    def to_json_dict(self) -> dict[str, Any]:
        s = self.summary
        return {
            "schema_version": SCHEMA_VERSION,
            "run": {
                "world_size": s.world_size,
                "ranks": list(s.ranks),
                "has_gpu": s.has_gpu,
                "frameworks": {str(k): v for k, v in s.frameworks.items()},
                "completed_overlapscope_run": s.completed_run,
                "sources": list(s.sources),
                "config": s.run_config,
            },
            "counted_steps": {str(k): list(v) for k, v in self.counted_steps.items()},
            "ranks": _records(self.ranks),
            "steps": _records(self.steps),
            "units": _records(self.units),
            "collectives": _records(self.collectives),
            "levers": _records(self.levers),
            "idle_streams": _records(self.idle_streams),
            "host_ops": _records(self.host_ops),
            "bound": {"per_rank": _records(self.bound), "summary": _clean(self.bound_summary)},
            "findings": [f.to_dict() for f in self.findings],
            "hta": (self.hta or HtaReport(_hta_default(s.has_gpu))).to_dict(),
            "warnings": list(self.warnings),
            **clocks_path_json(
                self.clocks, self.clocks_applied, self.path, self.clocks_shared_host
            ),
        }


def _hta_default(has_gpu: bool) -> str:
    return "not run (pass --hta)" if has_gpu else HtaStatus.NOT_APPLICABLE


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-ready records (NaN -> null, numpy scalars -> Python)."""
    out: list[dict[str, Any]] = json.loads(df.to_json(orient="records", double_precision=15))
    return out


def _clean(d: dict[str, float]) -> dict[str, float | None]:
    return {k: (None if v != v else v) for k, v in d.items()}


def run_summary(run: RunTraces) -> RunSummary:
    """What the report says the run is: world, ranks, producers, sources, configuration."""
    return RunSummary(
        world_size=run.world_size,
        ranks=tuple(r.rank for r in run.ranks),
        has_gpu=run.has_gpu,
        frameworks={r.rank: r.framework.value for r in run.ranks},
        completed_run=run.completed_run,
        sources=tuple(str(p) for p in run.sources),
        run_config=run.manifest.config_dict() if run.manifest else None,
    )


def ranked_findings(
    run: RunTraces,
    tables: dict[str, pd.DataFrame],
    path: CriticalPath,
) -> tuple[Finding, ...]:
    """The findings of the tables (``ranks, steps, units, collectives, host_ops``) and of
    the critical path, largest stake first."""
    ranks = tables["ranks"]
    findings = find(
        ranks, tables["units"], tables["collectives"], run.manifest, has_gpu=run.has_gpu
    )
    step_us = float(ranks["step_time_per_step_us"].mean()) if len(ranks) else float("nan")
    host = host_findings(ranks, tables["steps"], tables["host_ops"], path.links)
    everything = [*findings, *path_findings(path, step_us), *host]
    return tuple(sorted(everything, key=lambda f: -f.stake_us))


def analyze(
    run: RunTraces, *, hta: bool = False, hta_rounding: bool = False, align_clocks: bool = True
) -> RunAnalysis:
    """Analyse a loaded run. ``hta=True`` also runs HTA (slow, offline only);
    ``hta_rounding=True`` rounds GPU events to whole µs first, as HTA 0.5.0 does, to compare
    with its figures (see :func:`round_like_hta`). ``align_clocks``: put every rank on one
    clock first (analysis/clocks.py)."""
    if hta_rounding:
        run = round_like_hta(run)
    host = shared_host(run.manifest)
    run, clocks = align_run(run, align_clocks)
    path = critical_path(run.events)
    counted = counted_mask(run)
    sets = lane_sets(run, counted)
    exposure = comm_exposure(run, counted)
    waits = wait_tables(run, counted, step_table(run, counted, sets), sets, exposure)
    steps, path = waits.steps, with_host(path, waits.host_gaps)
    ranks = rank_idle(rank_table(run, counted, steps, sets), steps)
    comm = run.events.loc[exposure.index].assign(exposed_us=exposure.to_numpy(), late=waits.late)
    comm = split_exposure(comm, waits.pieces)
    units = unit_parts(unit_table(run, counted, exposure, ranks), comm, ranks)
    ranks = rank_parts(ranks, comm)
    collectives, collective_ranks = collective_tables(comm, run.world_size, clock_error(clocks))
    bound = bound_table(units, compute_by_unit(run, counted), ranks)
    tables = {"ranks": ranks, "steps": steps, "units": units, "collectives": collectives}
    tables["host_ops"] = waits.host_ops
    result = RunAnalysis(
        summary=run_summary(run),
        ranks=ranks,
        steps=steps,
        units=units,
        collectives=collectives,
        collective_ranks=collective_ranks,
        bound=bound,
        bound_summary=bound_summary(bound),
        findings=ranked_findings(run, tables, path),
        timeline=timeline_table(run, counted, exposure),
        exposed=exposed_intervals(run, counted, steps, sets),
        levers=lever_table(run, counted),
        idle_gaps=waits.gaps,
        idle_streams=waits.streams,
        host_ops=waits.host_ops,
        counted_steps={r.rank: r.steps for r in run.ranks},
        warnings=run.warnings,
        clocks=clocks,
        clocks_applied=align_clocks,
        clocks_shared_host=host,
        path=path,
    )
    if hta:
        result = result.with_hta(run_hta(run))
    return result
