"""Small hand-made ``RunAnalysis`` tables for builder tests."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd

from dashboards.data import LoadedRun, RunSource
from overlapscope.analysis.api import RunAnalysis, RunSummary
from overlapscope.analysis.findings import Finding
from overlapscope.manifest import RunManifest

TIMELINE_COLUMNS = [
    "rank", "step", "lane", "phase", "unit", "kind", "name", "tid", "on_gpu",
    "start_us", "end_us", "dur_us", "bytes", "exposed_us",
]  # fmt: skip


def timeline(rows: list[tuple[int, int, str, str, str, float, float, int]]) -> pd.DataFrame:
    """Rows of (rank, step, lane, phase, unit, start_us, end_us, bytes)."""
    df = pd.DataFrame(
        rows, columns=["rank", "step", "lane", "phase", "unit", "start_us", "end_us", "bytes"]
    )
    df["dur_us"] = df["end_us"] - df["start_us"]
    for col in ("lane", "phase", "unit"):
        df[col] = df[col].astype("category")
    return df.assign(kind=None, name="x", tid=1, on_gpu=False, exposed_us=0.0)[TIMELINE_COLUMNS]


def analysis(**tables: Any) -> RunAnalysis:
    """A ``RunAnalysis`` with the given tables; the others empty."""
    # Every table field not given is empty, whatever fields the analysis grows.
    fields: dict[str, Any] = {
        f.name: pd.DataFrame()
        for f in dataclasses.fields(RunAnalysis)
        if f.name != "summary" and f.default is dataclasses.MISSING
    }
    fields.update(
        collectives=pd.DataFrame({"busbw_gbps": pd.Series([], dtype=float)}),
        bound_summary={},
        findings=(),
        counted_steps={},
        warnings=(),
    )
    fields.update(tables)
    summary = RunSummary(
        world_size=2,
        ranks=(0, 1),
        has_gpu=False,
        frameworks={},
        completed_run=True,
        sources=(),
        run_config=None,
    )
    return RunAnalysis(summary=summary, **fields)


def loaded(
    label: str,
    policy: str,
    a: RunAnalysis,
    manifest: RunManifest | None = None,
    findings: tuple[Finding, ...] = (),
) -> LoadedRun:
    src = RunSource(key=label, path=Path("/nonexistent") / label, label=label, policy=policy)
    return LoadedRun(source=src, analysis=a, manifest=manifest)
