"""Frames as Arrow IPC files (lz4), written whole and read back exactly: the cache's format
for a rank's events and its event-sized tables.

:func:`write_events` / :func:`read_events` keep a rank's event table (its dtypes as pandas
gives them); :func:`write_table` / :func:`read_table` keep any frame with its exact pandas
dtypes in the schema's metadata (Arrow alone has no object column holding None next to NaN),
and read a step's rows of a few columns without converting the rest. Files are sealed
(:mod:`overlapscope.sealed`): written whole under a temporary name, and checked before Arrow
reads a byte of them (a damaged one is :class:`~overlapscope.sealed.DamagedFile`).
"""

from __future__ import annotations

import functools
import pickle
from pathlib import Path
from typing import Any

import pandas as pd

from overlapscope.sealed import SEAL_BYTES, DamagedFile, atomic, payload_size


def write_events(path: Path, events: pd.DataFrame) -> None:
    """``events`` (a default index) as an lz4 Arrow IPC file, sealed, in this thread.

    Arrow's thread pool would compress the columns in parallel: no less CPU in all, and
    each of its threads allocates from its own mimalloc heap, which pyarrow's pool switch
    (``pipeline.memory.released``) does not reach and which keeps what it freed resident: on a 33 MB
    GPU trace the events' write and read-back in threads took 0.048 s of CPU and left
    ~26 MB resident, in this thread 0.012 s and ~10 MB (measured)."""
    import pyarrow

    table = pyarrow.Table.from_pandas(events, preserve_index=False, nthreads=1)
    atomic(path, lambda t: _write_ipc(t, table))


def _write_ipc(path: Path, table: Any) -> None:
    import pyarrow

    options = pyarrow.ipc.IpcWriteOptions(compression="lz4", use_threads=False)
    with (
        pyarrow.OSFile(str(path), "wb") as sink,
        pyarrow.ipc.new_file(sink, table.schema, options=options) as writer,
    ):
        writer.write_table(table)


def _checked(path: Path) -> Any:
    """The Arrow IPC file inside a sealed file, its seal checked (memory-mapped: the
    columns not read are not copied)."""
    import pyarrow

    try:
        buffer = pyarrow.memory_map(str(path)).read_buffer()
    except FileNotFoundError as e:  # (its entry said it was there)
        raise DamagedFile(path, "missing from its entry") from e
    except (OSError, pyarrow.ArrowInvalid) as e:  # (an empty file does not map)
        if path.is_file() and path.stat().st_size < SEAL_BYTES:
            raise DamagedFile(path, "empty or cut short") from e
        raise
    return buffer.slice(0, payload_size(buffer, path))


def read_arrow(path: Path, columns: list[str] | None) -> Any:
    """The Arrow table of an IPC file, ``columns`` only (in that order; all when None),
    the others left unread; its schema's metadata kept."""
    import pyarrow

    source = _checked(path)
    try:
        names = pyarrow.ipc.open_file(source).schema.names
        if columns is None:
            columns = names
        fields = sorted(names.index(c) for c in columns)
        options = pyarrow.ipc.IpcReadOptions(use_threads=False, included_fields=fields)
        return pyarrow.ipc.open_file(source, options=options).read_all().select(columns)
    except (pyarrow.ArrowInvalid, ValueError) as e:  # (a whole file of another layout)
        raise DamagedFile(path, f"not the table expected ({e})") from e


def read_events(path: Path, columns: list[str] | None) -> pd.DataFrame:
    """The ``columns`` (all: None) of a file written by :func:`write_events`, as ``pd.read_feather``
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

    return _dtypes(pyarrow.ipc.open_file(_checked(path)).schema)


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
