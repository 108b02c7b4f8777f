"""Which files a run is: directories expanded into their trace files, one run at a time.

A directory's traces are those its ``run.json`` lists, else every ``*.json`` /
``*.json.gz`` in it that an overlapscope run does not write itself. Used by
:func:`~overlapscope.trace.run.loader.load_run` before any file is parsed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from overlapscope.errors import UserError
from overlapscope.manifest import RUN_JSON, RunManifest, read_manifest
from overlapscope.trace.run.runmeta import listed_traces

TRACE_SUFFIXES = (".json", ".json.gz")
# JSON files an overlapscope run or sweep writes beside its traces.
NOT_TRACES = frozenset({RUN_JSON, "config.json", "summary.json"})
ALLOW_FLAG = "--allow-missing-ranks"


def _is_trace_name(p: Path) -> bool:
    return p.name not in NOT_TRACES and p.name.endswith(TRACE_SUFFIXES)


def find_trace_files(
    paths: Sequence[Path], *, strict: bool = True, warnings: list[str] | None = None
) -> tuple[list[Path], list[Path], dict[Path, RunManifest | None]]:
    """Expand directories into their trace files (those run.json lists, else every
    ``*.json`` / ``*.json.gz`` an overlapscope run does not write itself); returns
    (files, run directories, each directory's run.json). Traces of more than one run
    directory are refused."""
    warn: list[str] = [] if warnings is None else warnings
    files: list[Path] = []
    dirs: list[Path] = []
    metas: dict[Path, RunManifest | None] = {}
    for p in paths:
        if p.is_dir():
            metas[p] = read_manifest(p)
            found = listed_traces(p, metas[p], strict, ALLOW_FLAG, warn)
            if found is None:
                found = sorted(q for q in p.iterdir() if q.is_file() and _is_trace_name(q))
            if not found:
                raise UserError(
                    f"{p}: no trace files (*.json, *.json.gz) in this directory; "
                    "pass a run directory written by 'overlapscope run' or the trace files"
                )
            files.extend(found)
            dirs.append(p)
        elif p.is_file():
            files.append(p)
        else:
            raise UserError(f"{p}: no such file or directory")
    runs = sorted({str(d) for d in dirs} | {str(f.parent) for f in files if _is_run_dir(f.parent)})
    if len({str(Path(r).resolve()) for r in runs}) > 1:
        raise UserError(
            f"traces of different runs ({runs[0]} and {runs[1]}); analyse one run at a time"
        )
    return files, dirs, metas


def _is_run_dir(d: Path) -> bool:
    return (d / RUN_JSON).is_file()
