"""Run every configuration of a sweep ``repeats`` times and analyse each run.

Order: round-robin (repeat 0 of every config, then repeat 1, ...), so slow drift of the
machine spreads over all configurations instead of biasing the last one. Each run goes
through the same launcher as ``overlapscope run`` (``overlapscope.engine.launch.launch``)
into ``<out>/runs/<config>/rep-<k>/`` and is analysed by the one entry point
(``overlapscope.pipeline.run.analyse``, in this process).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from overlapscope.config import RunConfig
from overlapscope.engine.launch import launch
from overlapscope.pipeline.plan import Inputs
from overlapscope.pipeline.run import IN_PROCESS, analyse
from overlapscope.sweep.metrics import RUN_COLUMNS, run_metrics
from overlapscope.sweep.spec import SweepPoint


@dataclass(frozen=True, slots=True)
class RunEvent:
    """Progress report: ``stage`` is ``"run"`` (starting), ``"analyze"`` or ``"done"``."""

    index: int  # 0-based position in the whole sweep
    total: int
    point: SweepPoint
    repeat: int
    stage: str


def run_dir(out: Path, point: SweepPoint, repeat: int) -> Path:
    return out / "runs" / point.label / f"rep-{repeat}"


def run_sweep(
    base: RunConfig,
    points: Sequence[SweepPoint],
    repeats: int,
    out: Path,
    on_event: Callable[[RunEvent], None] = lambda e: None,
) -> pd.DataFrame:
    """Run and analyse every (point, repeat); return one metrics row per run."""
    if repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {repeats}")
    records = []
    total = len(points) * repeats
    order = [(rep, point) for rep in range(repeats) for point in points]
    for i, (rep, point) in enumerate(order):
        on_event(RunEvent(i, total, point, rep, "run"))
        cfg = point.apply(base)
        done = launch(cfg, run_dir(out, point, rep), force=True)
        on_event(RunEvent(i, total, point, rep, "analyze"))
        analysed = analyse(Inputs((done,), progress=False), IN_PROCESS)  # (the one entry point)
        manifest = analysed.run.manifest if analysed.run is not None else None
        if manifest is None:
            raise RuntimeError(f"{done}: the launcher wrote no run.json")
        peaks = list(manifest.peak_mem_bytes)
        metrics = run_metrics(analysed.analysis, peaks, cfg.global_batch)
        records.append({"config": point.label, "repeat": rep, **metrics})
        on_event(RunEvent(i, total, point, rep, "done"))
    return pd.DataFrame.from_records(records, columns=RUN_COLUMNS)


def points_table(points: Sequence[SweepPoint]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "config": [p.label for p in points],
            "policy": [p.policy.value for p in points],
            "forward_prefetch": [p.forward_prefetch for p in points],
            "limit_all_gathers": pd.array([p.limit_all_gathers for p in points], dtype="Int64"),
        }
    )
