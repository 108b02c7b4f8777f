"""The cache of ``--dask``: per rank file, its parsed events and its reduced tables.

An entry is keyed by the trace file's resolved path, size and modification time, and by a
digest of the code that makes it (``overlapscope/trace/*.py`` for a parse,
``overlapscope/analysis/*.py`` too for a reduction), so a changed file or a changed parser
never reads a stale table. Files are written to a temporary name and renamed, so a reader
sees a whole file or none; a failed parse is cached too (its error), so a re-analysis does
not parse a broken file again.

Layout of ``<cache>``:

* ``<key>.meta.pkl``: what the client needs of a parsed file, a few KB (:class:`RankMeta`:
  the loader's view of the file without its events, its categories, its collectives' ends
  for the clock estimate), or its error;
* ``<key>.arrow``: the recognised events, on the file's own clock, as an Arrow IPC file
  (lz4: ~4x less CPU to write and read back than Parquet, measured by hand on a 56 MB rank's
  events; read by the reduction only, on a worker);
* ``<key>.sum-<context>/summary.pkl``: the rank's small reduced tables for one run context
  (clock shift, categories, clock offset); ``<table>.arrow`` beside it: its event-sized
  tables, as lz4 Arrow IPC files with their exact pandas dtypes in the schema's metadata;
* ``path-<run>.pkl``: the critical path of a run (cross-rank).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from overlapscope.errors import UserError
from overlapscope.trace.loader import _Parsed
from overlapscope.trace.parse import NotATraceError, TraceFileError

CACHE_FORMAT = 3
CACHE_ENV = "OVERLAPSCOPE_CACHE"
_PACKAGE = Path(__file__).resolve().parents[1]


def default_cache_dir() -> Path:
    """``$OVERLAPSCOPE_CACHE``, else the user cache (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "overlapscope" / "ranks"


def _digest(*folders: str) -> str:
    h = hashlib.sha256(str(CACHE_FORMAT).encode())
    for folder in folders:
        for src in sorted((_PACKAGE / folder).glob("*.py")):
            h.update(f"{folder}/{src.name}".encode())
            h.update(src.read_bytes())
    return h.hexdigest()[:16]


@functools.cache
def parser_digest() -> str:
    """Digest of the parser's source: a new parser invalidates every entry."""
    return _digest("trace")


@functools.cache
def analysis_digest() -> str:
    """Digest of the parser's, the analysis' and this package's source (reduced tables)."""
    return _digest("trace", "analysis", "cluster")


def entry_key(path: Path, world_hint: int) -> str:
    """The cache key of a trace file: its path, size, mtime, the world hint and the parser."""
    st = path.stat()
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{world_hint}|{parser_digest()}"
    return f"{path.name[:40]}-{hashlib.sha256(ident.encode()).hexdigest()[:24]}"


@dataclass(frozen=True, slots=True)
class RankMeta:
    """A parsed rank file as the client sees it: no event rows.

    ``parsed``: the loader's parse result with ``table.events`` empty but of the file's
    dtypes (its categories are the file's). ``clock_rows``: the file's communication rows
    with a sequence number and its first row (own clock, no rank column): what the clock
    estimate reads. ``num_events``, ``has_gpu``: of the whole table."""

    parsed: _Parsed
    clock_rows: pd.DataFrame
    num_events: int
    has_gpu: bool


@dataclass(frozen=True, slots=True)
class RankCache:
    """A cache directory (see the module docstring)."""

    root: Path

    def prepare(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            writable = os.access(self.root, os.W_OK)
        except OSError as e:
            raise UserError(
                f"{self.root}: cannot create the cache directory ({e.strerror}); "
                "pass --cache DIR with a writable directory"
            ) from e
        if not writable:
            raise UserError(f"{self.root}: cache directory not writable; pass --cache DIR")

    def meta_path(self, key: str) -> Path:
        return self.root / f"{key}.meta.pkl"

    def events_path(self, key: str) -> Path:
        return self.root / f"{key}.arrow"

    def has(self, key: str) -> bool:
        return self.meta_path(key).is_file()

    def write(self, key: str, result: RankMeta | TraceFileError, events: pd.DataFrame) -> None:
        """Store one parse result (the events first, then the meta that marks it whole)."""
        if isinstance(result, RankMeta):
            frame = events.reset_index(drop=True)
            atomic(self.events_path(key), lambda t: write_events(t, frame))
            data = pickle.dumps(result)
        else:
            error = (isinstance(result, NotATraceError), str(result.path), result.problem)
            data = pickle.dumps(error)
        atomic(self.meta_path(key), lambda t: t.write_bytes(data))

    def read(self, key: str, path: Path) -> RankMeta | TraceFileError:
        """The cached result of ``path`` (named as this analysis names it)."""
        loaded = pickle.loads(self.meta_path(key).read_bytes())
        if isinstance(loaded, RankMeta):
            raw = loaded.parsed.raw
            renamed = _Parsed(_renamed(raw, path), loaded.parsed.table)
            return RankMeta(renamed, loaded.clock_rows, loaded.num_events, loaded.has_gpu)
        not_a_trace, _, problem = loaded
        cls = NotATraceError if not_a_trace else TraceFileError
        return cls(path, str(problem))


def _renamed(raw: Any, path: Path) -> Any:
    import dataclasses

    return dataclasses.replace(raw, path=path)


def atomic(dest: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)`` then rename ``tmp`` to ``dest``: readers see all of it or nothing."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def write_events(path: Path, events: pd.DataFrame) -> None:
    """``events`` (a default index) as an lz4 Arrow IPC file, in this thread.

    Arrow's thread pool would compress the columns in parallel: no less CPU in all, and
    each of its threads allocates from its own mimalloc heap, which pyarrow's pool switch
    (``tasks.released``) does not reach and which keeps what it freed resident: on a 33 MB
    GPU trace the events' write and read-back in threads took 0.048 s of CPU and left
    ~26 MB resident, in this thread 0.012 s and ~10 MB (measured)."""
    import pyarrow

    _write_ipc(path, pyarrow.Table.from_pandas(events, preserve_index=False, nthreads=1))


def _write_ipc(path: Path, table: Any) -> None:
    import pyarrow

    options = pyarrow.ipc.IpcWriteOptions(compression="lz4", use_threads=False)
    with (
        pyarrow.OSFile(str(path), "wb") as sink,
        pyarrow.ipc.new_file(sink, table.schema, options=options) as writer,
    ):
        writer.write_table(table)


def read_arrow(path: Path, columns: list[str] | None) -> Any:
    """The Arrow table of an IPC file, ``columns`` only (in that order; all when None),
    the others left unread; its schema's metadata kept."""
    import pyarrow

    with pyarrow.OSFile(str(path)) as source:
        names = pyarrow.ipc.open_file(source).schema.names
        if columns is None:
            columns = names
        fields = sorted(names.index(c) for c in columns)
        options = pyarrow.ipc.IpcReadOptions(use_threads=False, included_fields=fields)
        return pyarrow.ipc.open_file(source, options=options).read_all().select(columns)


def read_events(path: Path, columns: list[str]) -> pd.DataFrame:
    """The ``columns`` of a file written by :func:`write_events`, as ``pd.read_feather``
    gives them, read in this thread (:func:`write_events` for why)."""
    return read_arrow(path, columns).to_pandas(use_threads=False)


DTYPES_KEY = b"overlapscope.dtypes"  # the frame's exact pandas dtypes (pickled)


def write_table(path: Path, df: pd.DataFrame) -> None:
    """``df`` as an lz4 Arrow IPC file (as :func:`write_events`), its exact pandas dtypes
    in the schema's metadata, so that :func:`read_table` gives back an equal frame (Arrow
    has no object column holding None next to NaN). Parquet (snappy) took ~3x the CPU to
    write: on a 33 MB GPU trace's timeline and path rows 9.3 -> 3.8 ms (measured)."""
    import pyarrow

    table = pyarrow.Table.from_pandas(df, preserve_index=False, nthreads=1)
    dtypes = pickle.dumps(dict(df.dtypes))
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), DTYPES_KEY: dtypes})
    atomic(path, lambda t: _write_ipc(t, table))


def read_table(
    path: Path,
    filters: list[tuple[str, str, Any]] | None = None,
    columns: list[str] | None = None,
) -> pd.DataFrame:
    """A frame written by :func:`write_table` (``filters``: ``(column, "==", value)`` row
    filters, all of which a row meets; ``columns``: only these columns are read).

    The rows are filtered once read: a rank's table is one record batch, which a filter
    would not skip in any format."""
    import pyarrow.compute

    tests = [(c, _equality(op, v)) for c, op, v in filters or ()]
    wanted = None if columns is None else list(columns)
    read = None if wanted is None else [*wanted, *(c for c, _ in tests if c not in wanted)]
    table = read_arrow(path, read)
    if tests:
        masks = [pyarrow.compute.equal(table[c], v) for c, v in tests]
        table = table.filter(functools.reduce(pyarrow.compute.and_kleene, masks))
    if wanted is not None:
        table = table.select(wanted)
    df = table.to_pandas(use_threads=False)
    dtypes = _dtypes(table.schema)
    fixed = {c: _restore(df[c], t) for c, t in dtypes.items() if c in df and df[c].dtype != t}
    return df.assign(**fixed) if fixed else df


def _equality(op: str, value: Any) -> Any:
    if op != "==":
        raise ValueError(f"read_table filters test equality only, not {op!r}")
    return value


def _dtypes(schema: Any) -> dict[str, Any]:
    dtypes: dict[str, Any] = pickle.loads(schema.metadata[DTYPES_KEY])
    return dtypes


def table_dtypes(path: Path) -> dict[str, Any]:
    """The columns and exact dtypes of a frame written by :func:`write_table` (no row read)."""
    import pyarrow

    with pyarrow.OSFile(str(path)) as source:
        return _dtypes(pyarrow.ipc.open_file(source).schema)


def empty_table(path: Path) -> pd.DataFrame:
    """The frame :func:`read_table` gives, without its rows (and without reading them)."""
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in table_dtypes(path).items()})


def _restore(col: pd.Series, dtype: Any) -> pd.Series:
    if isinstance(dtype, pd.CategoricalDtype):
        return pd.Series(pd.Categorical(col, dtype=dtype), index=col.index)
    if pd.api.types.is_object_dtype(dtype):
        obj = col.astype(object)
        return obj.where(col.notna(), None)
    return col.astype(dtype)
