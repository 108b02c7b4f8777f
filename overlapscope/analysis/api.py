"""The analysis facade: what an analysis gives (:class:`RunAnalysis`), the cross-rank step
that makes it (:func:`combine`) and ``analyze(run) -> RunAnalysis`` for a loaded run.

Every executor runs the same analysis (``analysis/registry.py``): the per-rank map, then
:func:`combine`. :func:`analyze` runs the map in this process on a run already loaded (the
dashboard, the what-if, tests); ``overlapscope analyze`` runs it through the per-rank cache on
a local pool or on Dask (``overlapscope/pipeline``), and ends with :func:`combine` too.

:class:`RunAnalysis` holds every table the CLI and the dashboard show; nothing downstream
re-derives a metric. ``to_json_dict()`` gives the versioned JSON document described in
``docs/ANALYSIS.md``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from overlapscope.analysis.clocks.alignment import Clocks, estimate_clocks
from overlapscope.analysis.critical_path.path import CriticalPath, critical_path
from overlapscope.analysis.critical_path.report import to_json as clocks_path_json
from overlapscope.analysis.findings import Finding, FindingInput
from overlapscope.analysis.findings.registry import run_rules
from overlapscope.analysis.framework import Framework, run_framework
from overlapscope.analysis.hta.report import HtaReport, HtaStatus, round_like_hta, run_hta
from overlapscope.analysis.registry import (
    CLOCKS,
    FRAMEWORK_MARKS,
    PATH,
    RANK_FIGURES,
    rank_tables,
    run_tables,
)
from overlapscope.analysis.timeline.bound import bound_summary
from overlapscope.analysis.waiting.host_path import with_host
from overlapscope.trace.run.loader import RunTraces

SCHEMA_VERSION = 3


@dataclass(frozen=True, slots=True)
class RunSummary:
    world_size: int
    ranks: tuple[int, ...]
    has_gpu: bool
    frameworks: dict[int, str]
    completed_run: bool
    sources: tuple[str, ...]
    run_config: dict[str, Any] | None
    framework: Framework = Framework.PLAIN  # what ran the job (analysis/framework.py)


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
    levers: pd.DataFrame  # recompute / h2d / d2h per unit (analysis/timeline/levers.py)
    idle_gaps: pd.DataFrame  # every GPU idle gap with its cause (analysis/waiting/idle.py)
    idle_streams: pd.DataFrame  # per stream, HTA's idle breakdown beside ours (waiting/idle.py)
    host_ops: pd.DataFrame  # what the host did while the GPU waited for it (waiting/idle.py)
    counted_steps: dict[int, tuple[int, ...]]
    warnings: tuple[str, ...]
    hta: HtaReport | None = None
    clocks: pd.DataFrame | None = None  # per-rank clock offsets (analysis/clocks/alignment.py)
    clocks_applied: bool = False
    clocks_shared_host: str | None = None  # every rank on this host: one clock (clocks.py)
    path: CriticalPath | None = None  # critical path per step (analysis/critical_path/path.py)
    # the registered figures without a field of their own, by name (analysis/registry.py)
    tables: Mapping[str, pd.DataFrame] = dataclasses.field(default_factory=dict)

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
                "framework": s.framework.value,
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
            **({"tables": {k: _records(v) for k, v in self.tables.items()}} if self.tables else {}),
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
        frameworks={r.rank: r.framework for r in run.ranks},
        completed_run=run.completed_run,
        sources=tuple(str(p) for p in run.sources),
        run_config=run.manifest.config_dict() if run.manifest else None,
    )


def ranked_findings(
    run: RunTraces,
    tables: Mapping[str, pd.DataFrame],
    path: CriticalPath,
    framework: Framework = Framework.PLAIN,
) -> tuple[Finding, ...]:
    """The registered findings (analysis/findings/registry.py) of the tables and the
    critical path, largest stake first."""
    return run_rules(
        FindingInput(
            ranks=tables["ranks"],
            steps=tables["steps"],
            units=tables["units"],
            collectives=tables["collectives"],
            host_ops=tables["host_ops"],
            manifest=run.manifest,
            has_gpu=run.has_gpu,
            path=path,
            tables=tables,
            framework=framework,
        )
    )


# The fields of RunAnalysis a figure of that name fills; the others go to ``tables``.
_FIELDS = frozenset(f.name for f in dataclasses.fields(RunAnalysis))
# The per-rank figures reported (the others are read by cross-rank figures only).
_REPORTED = frozenset(f.name for f in RANK_FIGURES if f.output)


def combine(
    run: RunTraces, per_rank: Mapping[str, pd.DataFrame], clocks: Clocks, path: CriticalPath
) -> RunAnalysis:
    """The cross-rank step of every executor: the analysis from the per-rank figures of every
    rank (each concatenated in rank order; the timeline may be left empty). ``run``: the
    loaded run (its events are not read), its warnings those of the loader and the clocks."""
    given = {**per_rank, CLOCKS: clocks.offsets}  # (the collectives read the clocks' bounds)
    tables = run_tables(given, run)
    reported = {k: v for k, v in tables.items() if k in _REPORTED or (k not in given and k != PATH)}
    path = with_host(path, tables["host_gaps"])  # (the path's idle links the host caused)
    engine = run.manifest is not None and run.manifest.is_engine_run
    framework = run_framework(tables["ranks"], tables[FRAMEWORK_MARKS], engine)
    return RunAnalysis(
        summary=dataclasses.replace(run_summary(run), framework=framework),
        **{k: v for k, v in reported.items() if k in _FIELDS},
        bound_summary=bound_summary(tables["bound"]),
        findings=ranked_findings(run, tables, path, framework),
        counted_steps={r.rank: r.steps for r in run.ranks},
        warnings=run.warnings,
        clocks=clocks.offsets,
        clocks_applied=clocks.applied,
        clocks_shared_host=clocks.shared_host,
        path=path,
        tables={k: v for k, v in reported.items() if k not in _FIELDS},
    )


def rank_runs(run: RunTraces) -> Iterator[RunTraces]:
    """Each rank of a loaded run as a one-rank run (its rows as the loader made them)."""
    rank = run.events["rank"].to_numpy()
    for info in run.ranks:
        rows = np.flatnonzero(rank == info.rank)
        contiguous = len(rows) and rows[-1] - rows[0] + 1 == len(rows)
        events = run.events.iloc[rows[0] : rows[-1] + 1] if contiguous else run.events.iloc[rows]
        yield dataclasses.replace(
            run,
            events=events.reset_index(drop=True),
            ranks=(info,),
            warnings=(),
            sources=(info.path,),
        )


def concat_ranks(parts: Sequence[Mapping[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """Each per-rank figure of every rank, concatenated in rank order."""
    return {name: pd.concat([p[name] for p in parts], ignore_index=True) for name in parts[0]}


def analyze(
    run: RunTraces, *, hta: bool = False, hta_rounding: bool = False, align_clocks: bool = True
) -> RunAnalysis:
    """Analyse a loaded run: the per-rank map in this process, then :func:`combine`.
    ``hta=True`` also runs HTA (slow, offline only); ``hta_rounding=True`` rounds GPU
    events to whole µs first, as HTA 0.5.0 does, to compare with its figures (see
    :func:`round_like_hta`). ``align_clocks``: put every rank on one clock first
    (analysis/clocks/alignment.py)."""
    if hta_rounding:
        run = round_like_hta(run)
    run, clocks = estimate_clocks(run, align_clocks)
    per_rank = concat_ranks([rank_tables(r) for r in rank_runs(run)])
    path = critical_path(per_rank[PATH])
    result = combine(dataclasses.replace(run, events=run.events.iloc[:0]), per_rank, clocks, path)
    if hta:
        result = result.with_hta(run_hta(run))
    return result
