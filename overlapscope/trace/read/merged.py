"""A trace of every rank in one file (what ``analyze --perfetto`` writes), read back as the
per-rank traces it came from.

The file is a Chrome trace (``traceEvents``) whose top level names it
(:data:`EXPORT_KEY`). Each rank is one process; its ``process_name`` metadata event carries
the rank's identity in its ``args`` (:data:`RANK_ARGS`), and each thread that came from the
rank's source trace has a ``thread_name`` whose ``args`` keep the source's ``pid`` and ``tid``
(:data:`SOURCE_PID`, :data:`SOURCE_TID`). Threads without them are overlapscope's own tracks.

:func:`split_merged` writes one Kineto-style trace per rank (``rank-<N>.trace.json.gz``: its
source events with their own pid and tid, on the aligned clock, with its ``distributedInfo``
and the run's ``baseTimeNanoseconds``), which the loader reads as any other run.
"""

from __future__ import annotations

import gzip
import os
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

import orjson

from overlapscope.errors import UserError

EXPORT_KEY = "overlapscope_export"
FORMAT_VERSION = 1
# process_name args of a rank's process
RANK_ARG, WORLD_ARG, DIST_ARG = "rank", "world_size", "distributed_info"
RANK_ARGS = (RANK_ARG, WORLD_ARG, DIST_ARG)
# thread_name args of a thread of the rank's source trace (and of an extra row of its track:
# its events the thread's, its name and sort index not; perfetto/source.py)
SOURCE_PID, SOURCE_TID, SOURCE_ROW = "source_pid", "source_tid", "source_row"
# top-level fields of the export (under EXPORT_KEY)
EPOCH_ARG = "epoch_ns"  # the run's time 0 in ns (the loader's epoch): baseTimeNanoseconds
# How much of the file is read to tell an export from a per-rank trace.
_HEAD_BYTES = 4096


def _open_text(path: Path) -> BinaryIO:
    """The file's text, gunzipped if it is gzip."""
    with path.open("rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    return cast(BinaryIO, gzip.open(path, "rb")) if gz else path.open("rb")


def is_merged(path: Path) -> bool:
    """Whether ``path`` is an overlapscope export of several ranks (read from its first
    bytes: the writer puts :data:`EXPORT_KEY` first). A file that cannot be read is not."""
    try:
        with _open_text(path) as f:
            head = f.read(_HEAD_BYTES)
    except (OSError, EOFError, zlib.error):
        return False
    return f'"{EXPORT_KEY}"'.encode() in head


@dataclass
class _Rank:
    """One rank's trace being written: its process's identity and where its events go."""

    rank: int
    info: dict[str, Any]
    out: gzip.GzipFile | None = None
    path: Path | None = None
    threads: dict[Any, tuple[Any, Any]] = field(default_factory=dict)  # tid -> source's
    rows: set[Any] = field(default_factory=set)  # tids of extra rows of a source thread
    first: bool = True


def _header_epoch(header: bytes) -> int | None:
    """The run's epoch from the writer's header line (the document up to its events' ``[``);
    None for another layout."""
    try:
        return int(orjson.loads(header.rstrip() + b"]}")[EXPORT_KEY][EPOCH_ARG])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    """The events of a file in the writer's layout, one line at a time."""
    with _open_text(path) as f:
        f.readline()  # (the header)
        for line in f:
            body = line.rstrip().rstrip(b",")
            if not body.startswith(b"{"):
                continue
            try:
                event = orjson.loads(body)
            except orjson.JSONDecodeError:
                raise UserError(
                    f"{path}: a line of its events is not one event; write it again with "
                    "analyze --perfetto"
                ) from None
            if isinstance(event, dict):
                yield event


def _events(path: Path) -> tuple[int, Iterator[dict[str, Any]]]:
    """The run's epoch and the export's events: a line at a time in the layout the writer
    makes; a file in another layout (re-saved by another tool) is decoded whole."""
    with _open_text(path) as f:
        epoch = _header_epoch(f.readline())
    if epoch is not None:
        return epoch, _lines(path)
    with _open_text(path) as f:
        doc = orjson.loads(f.read())
    try:
        epoch = int(doc[EXPORT_KEY][EPOCH_ARG])
        events = doc["traceEvents"]
    except (KeyError, TypeError, ValueError):
        raise UserError(
            f"{path}: no {EXPORT_KEY}.{EPOCH_ARG} or traceEvents; pass a file written by "
            "analyze --perfetto"
        ) from None
    return epoch, (e for e in events if isinstance(e, dict))


def _open_rank(state: _Rank, dest: Path, epoch_ns: int) -> None:
    state.path = dest / f"rank-{state.rank}.trace.json.gz"
    tmp = state.path.with_name(f".{state.path.name}.partial-{os.getpid()}")
    state.out = gzip.GzipFile(tmp, "wb", compresslevel=1)  # (closed by _close_rank)
    top = {
        "schemaVersion": 1,
        "distributedInfo": state.info.get(DIST_ARG)
        or {"rank": state.rank, "world_size": state.info.get(WORLD_ARG)},
        "baseTimeNanoseconds": epoch_ns,
    }
    state.out.write(orjson.dumps(top)[:-1] + b',"traceEvents":[\n')  # (open: its events follow)


def _close_rank(state: _Rank, whole: bool) -> None:
    """Finish the rank's trace (``whole``: renamed into place; else removed)."""
    assert state.out is not None and state.path is not None
    tmp = state.path.with_name(f".{state.path.name}.partial-{os.getpid()}")
    if whole:
        state.out.write(b"\n]}\n")
    state.out.close()
    if whole:
        os.replace(tmp, state.path)
    else:
        tmp.unlink(missing_ok=True)


def _write(state: _Rank, event: dict[str, Any]) -> None:
    assert state.out is not None
    state.out.write(orjson.dumps(event) if state.first else b",\n" + orjson.dumps(event))
    state.first = False


def _args(event: dict[str, Any]) -> dict[str, Any]:
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def _route(event: dict[str, Any], ranks: dict[Any, _Rank], dest: Path, epoch: int) -> None:
    """Sends one event of the export to its rank's trace (a source thread's event, with its
    own pid and tid) or nowhere (overlapscope's tracks, other processes)."""
    pid, ph, name, args = event.get("pid"), event.get("ph"), event.get("name"), _args(event)
    if ph == "M" and name == "process_name" and isinstance(args.get(RANK_ARG), int):
        new = ranks[pid] = _Rank(int(args[RANK_ARG]), args)
        _open_rank(new, dest, epoch)
        return
    state = ranks.get(pid)
    if state is None:
        return
    tid = event.get("tid")
    if ph == "M" and name == "thread_name" and SOURCE_TID in args:
        state.threads[tid] = (args.get(SOURCE_PID), args[SOURCE_TID])
        if SOURCE_ROW in args:
            state.rows.add(tid)
    if ph == "M" and tid in state.rows:
        return
    if tid in state.threads:
        pid0, tid0 = state.threads[tid]
        _write(state, {**event, "pid": pid0, "tid": tid0})


def split_merged(path: Path, dest: Path) -> list[Path]:
    """Write each rank of the export ``path`` as its own trace in ``dest``; returns them,
    by rank. Raises :class:`UserError` naming ``path`` when it holds no rank."""
    epoch, events = _events(path)
    ranks: dict[Any, _Rank] = {}
    whole = False
    try:
        for event in events:
            _route(event, ranks, dest, epoch)
        whole = True
    finally:
        for state in ranks.values():
            if state.out is not None and not state.out.closed:
                _close_rank(state, whole)
    if not ranks:
        raise UserError(f"{path}: an overlapscope export without any rank; nothing to analyse")
    return [s.path for s in sorted(ranks.values(), key=lambda s: s.rank) if s.path]


# Where the exports given to the loader are split: kept while the process runs (the loaded
# run's sources name these files), removed when it ends.
_SPLIT_DIRS: list[tempfile.TemporaryDirectory[str]] = []


def expand_merged(files: list[Path], named: set[Path]) -> list[Path]:
    """``files`` with each export among those named one by one (``named``) replaced by its
    ranks' traces (:func:`split_merged`, into a temporary folder)."""
    out: list[Path] = []
    for f in files:
        if f in named and is_merged(f):
            tmp = tempfile.TemporaryDirectory(prefix="overlapscope-merged-")
            _SPLIT_DIRS.append(tmp)
            out.extend(split_merged(f, Path(tmp.name)))
        else:
            out.append(f)
    return out
