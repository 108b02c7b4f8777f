"""The per-rank cache: one parsed rank file as Parquet plus a small JSON sidecar.

An entry is keyed by the trace file's resolved path, size and modification time, and by a
digest of the parser's own source (``overlapscope/trace/*.py``), so a changed file or a
changed parser never reads a stale table. Entries are written to a temporary name and
renamed, so a reader sees a whole entry or none; a failed parse is cached too (its error),
so a re-analysis does not parse a broken file again.

Layout of an entry ``<cache>/<key>``: ``<key>.json`` (the rank's context, or its error) and,
for a parsed file, ``<key>.parquet`` (the recognised event table, rank column not yet added).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from overlapscope.errors import UserError
from overlapscope.trace.loader import _Parsed
from overlapscope.trace.parse import NotATraceError, RawTrace, TraceFileError
from overlapscope.trace.recognize import ComputeSource, RankTable
from overlapscope.trace.schema import Framework

CACHE_FORMAT = 1
CACHE_ENV = "OVERLAPSCOPE_CACHE"


def default_cache_dir() -> Path:
    """``$OVERLAPSCOPE_CACHE``, else the user cache (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "overlapscope" / "ranks"


@functools.cache
def parser_digest() -> str:
    """Digest of the parser's source: a new parser invalidates every entry."""
    trace_dir = Path(__file__).resolve().parents[1] / "trace"
    h = hashlib.sha256(str(CACHE_FORMAT).encode())
    for src in sorted(trace_dir.glob("*.py")):
        h.update(src.name.encode())
        h.update(src.read_bytes())
    return h.hexdigest()[:16]


def entry_key(path: Path, world_hint: int) -> str:
    """The cache key of a trace file: its path, size, mtime, the world hint and the parser."""
    st = path.stat()
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{world_hint}|{parser_digest()}"
    return f"{path.name[:40]}-{hashlib.sha256(ident.encode()).hexdigest()[:24]}"


@dataclass(frozen=True, slots=True)
class RankCache:
    """A cache directory of parsed rank files (see the module docstring)."""

    root: Path

    def prepare(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(
                f"{self.root}: cannot create the cache directory ({e.strerror}); "
                "pass --cache DIR with a writable directory"
            ) from e

    def has(self, key: str) -> bool:
        return (self.root / f"{key}.json").is_file()

    def write(self, key: str, result: _Parsed | TraceFileError) -> None:
        """Store one parse result (the table first, then the sidecar that marks it whole)."""
        if isinstance(result, TraceFileError):
            meta: dict[str, Any] = {
                "error": result.problem,
                "not_a_trace": isinstance(result, NotATraceError),
                "path": str(result.path),
            }
        else:
            meta = _meta_of(result)
            _atomic(self.root / f"{key}.parquet", lambda t: result.table.events.to_parquet(t))
        text = json.dumps(meta)
        _atomic(self.root / f"{key}.json", lambda t: t.write_text(text))

    def read(self, key: str, path: Path) -> _Parsed | TraceFileError:
        """The cached result of ``path`` (named as this analysis names it)."""
        meta = json.loads((self.root / f"{key}.json").read_text())
        if "error" in meta:
            cls = NotATraceError if meta["not_a_trace"] else TraceFileError
            return cls(path, str(meta["error"]))
        events = pd.read_parquet(self.root / f"{key}.parquet")
        # Parquet cannot say "categorical with no categories": it reads back as object.
        empty = pd.Index([], dtype=object)
        restored = {
            c: pd.Categorical(events[c], categories=empty) for c in meta["empty_categories"]
        }
        return _parsed_of(meta, events.assign(**restored), path)


def _atomic(dest: Path, write: Any) -> None:
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _meta_of(p: _Parsed) -> dict[str, Any]:
    raw, table = p.raw, p.table
    return {
        "rank": raw.rank,
        "world_size": raw.world_size,
        "backend": raw.backend,
        "base_time_ns": raw.base_time_ns,
        "origin_ns": raw.origin_ns,
        "thread_names": {str(k): v for k, v in raw.thread_names.items()},
        "framework": table.framework.value,
        "compute_source": table.compute_source.value,
        "steps": list(table.steps),
        "warnings": list(table.warnings),
        "empty_categories": [
            c
            for c in table.events.columns
            if isinstance(table.events[c].dtype, pd.CategoricalDtype)
            and len(table.events[c].cat.categories) == 0
        ],
    }


def _parsed_of(meta: dict[str, Any], events: pd.DataFrame, path: Path) -> _Parsed:
    raw = RawTrace(
        path=path,
        rank=meta["rank"],
        world_size=meta["world_size"],
        backend=meta["backend"],
        base_time_ns=meta["base_time_ns"],
        origin_ns=int(meta["origin_ns"]),
        events=pd.DataFrame(),
        comm_args=pd.DataFrame(),
        thread_names={int(k): v for k, v in meta["thread_names"].items()},
    )
    table = RankTable(
        events=events,
        framework=Framework(meta["framework"]),
        compute_source=ComputeSource(meta["compute_source"]),
        steps=tuple(int(s) for s in meta["steps"]),
        warnings=tuple(meta["warnings"]),
    )
    return _Parsed(raw, table)
