"""Runs exported once per session: the shipped runs, the shared external traces."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from overlapscope.analysis.api import RunAnalysis, analyze
from overlapscope.perfetto.export import write_perfetto
from overlapscope.trace.run.loader import RunTraces, load_run
from tests.conftest import EXTERNAL_TRACES, REPO
from tests.perfetto.chrome_trace import Trace, read_trace

SHIPPED = sorted(p.name for p in (REPO / "traces").iterdir() if (p / "run.json").is_file())
EXTERNAL = (
    sorted(p.name for p in EXTERNAL_TRACES.glob("*.json.gz")) if EXTERNAL_TRACES.is_dir() else []
)
# traces without distributedInfo: their rank is the one the loader gives (a single file: 0)
NO_EXTERNAL = "../shared/external-traces is absent: the external traces are not exported"


@dataclass(frozen=True)
class Exported:
    """A run, its analysis, its export and the export read back as a Chrome trace."""

    run: RunTraces
    analysis: RunAnalysis
    path: Path
    trace: Trace
    warnings: tuple[str, ...]


_DONE: dict[tuple[str, tuple[object, ...]], Exported] = {}


def export(
    source: Path,
    out_dir: Path,
    steps: tuple[int, ...] | None = None,
    ranks: tuple[int, ...] | None = None,
) -> Exported:
    """``source`` loaded, analysed and exported (once per session for the same choice)."""
    key = (str(source), (steps, ranks))
    if key not in _DONE:
        run = load_run(source, progress=False)
        analysis = analyze(run)
        path = out_dir / f"export-{len(_DONE)}.json.gz"
        warnings = write_perfetto(path, analysis, run, steps, ranks)
        _DONE[key] = Exported(run, analysis, path, read_trace(path), warnings)
    return _DONE[key]


@pytest.fixture(scope="session")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("perfetto")
