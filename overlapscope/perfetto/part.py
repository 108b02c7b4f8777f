"""One rank's part of the file: its process, its own trace on the aligned clock, and the
analysis' tracks (:mod:`~overlapscope.perfetto.tracks`, :mod:`~overlapscope.perfetto.path`),
compressed on its own (:mod:`~overlapscope.perfetto.deflate`).

:class:`RankPart` is everything the part needs (one rank's rows of the analysis' tables, a
few KB to MB): :func:`write_part` runs wherever the rank's source file can be read, in this
process or in a Dask task.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd

from overlapscope.perfetto import events as ev
from overlapscope.perfetto import path as path_track
from overlapscope.perfetto.deflate import PartSum, PartWriter
from overlapscope.perfetto.select import Selection, overlaps
from overlapscope.perfetto.source import Clock, read_source, write_source
from overlapscope.perfetto.tracks import Tracks, by_phase, clean, exposed_pieces, peer_waits
from overlapscope.trace.read.merged import DIST_ARG, RANK_ARG, WORLD_ARG


@dataclass(frozen=True, slots=True)
class RankTables:
    """The rank's rows of the analysis, on the aligned clock. ``comm``: its transfers
    (``ts_us, end_us`` and labels); ``exposed``: its exposed intervals; ``waits``: its rows of
    ``collective_ranks`` with their collective's straggler, lag and transfer time; ``idle``:
    its GPU idle gaps with their cause (None: the analysis has none); ``links``: the critical
    path's links on it; ``hops``: the path's hops that leave or reach it; ``findings``: the
    marks of its findings (``ts_us, step`` and the finding's fields)."""

    comm: pd.DataFrame | None
    exposed: pd.DataFrame | None
    waits: pd.DataFrame
    idle: pd.DataFrame | None
    links: pd.DataFrame
    hops: pd.DataFrame
    findings: pd.DataFrame


@dataclass(frozen=True, slots=True)
class RankPart:
    """One rank's part: its source trace and clock, its clock estimate (the rank's row of
    the offsets table, for its process's name), the steps, windows and ranks of the file,
    and its tables (``comm`` and ``exposed`` None: read by the task from the cache)."""

    rank: int
    world_size: int
    source: Path
    clock: Clock
    estimate: dict[str, Any]
    selection: Selection
    tables: RankTables

    def with_rows(
        self, comm: pd.DataFrame, exposed: pd.DataFrame, idle: pd.DataFrame | None = None
    ) -> RankPart:
        """This part with the rank's rows read where its figures lie (a task, the cache);
        ``idle``: its idle gaps there (None: the cache has none; the part keeps its own)."""
        idle = idle if idle is not None else self.tables.idle
        tables = dataclasses.replace(self.tables, comm=comm, exposed=exposed, idle=idle)
        return dataclasses.replace(self, tables=tables)


@dataclass(frozen=True, slots=True)
class PartDone:
    """A written part: its text's checksum and length, and what was left out (warnings)."""

    sum: PartSum
    warnings: tuple[str, ...]


def _us(value: Any) -> str:
    return f"{value:+,.1f}" if isinstance(value, (int, float)) and math.isfinite(value) else "?"


def process_name(rank: int, estimate: dict[str, Any]) -> str:
    """The rank's process as the viewer lists it: the rank, and its clock offset with its
    uncertainty (the standard error of the estimate), or why its clock is as recorded."""
    offset, err = estimate.get("offset_us"), estimate.get("stderr_us")
    if estimate.get("reference_rank") == rank:
        return f"rank {rank} · reference clock"
    if not (isinstance(offset, float) and math.isfinite(offset)):
        return f"rank {rank} · clock as recorded (offset not estimated)"
    text = f"offset {_us(offset)} ± {abs(err or 0):,.1f} µs"
    drift = estimate.get("drift_ppm") or 0.0
    if drift:
        text += f", drift {drift:+.2f} ppm"
    if estimate.get("aligned"):
        return f"rank {rank} · clock {text} (removed)"
    return f"rank {rank} · clock as recorded (estimated {text}, not applied)"


def _process(part: RankPart, distributed: dict[str, Any] | None) -> list[dict[str, Any]]:
    pid = ev.rank_pid(part.rank)
    info = dict(distributed or {})
    info.update(rank=part.rank, world_size=part.world_size)
    args = {
        "name": process_name(part.rank, part.estimate),
        RANK_ARG: part.rank,
        WORLD_ARG: part.world_size,
        DIST_ARG: info,
        **clean(part.estimate),
    }
    return [
        ev.metadata("process_name", pid, pid, args),
        ev.metadata("process_sort_index", pid, pid, {"sort_index": part.rank}),
    ]


def _in_windows(table: pd.DataFrame, part: RankPart, start: str, end: str) -> pd.DataFrame:
    windows = part.selection.windows
    if windows is None or not len(table):
        return table
    keep = [overlaps(windows, a, b) for a, b in zip(table[start], table[end], strict=True)]
    return table[keep]


def _findings(tracks: Tracks, marks: pd.DataFrame) -> None:
    if not len(marks):
        return
    tid = tracks.new("findings")
    for mark in marks.to_dict("records"):
        args = clean({k: v for k, v in mark.items() if k != "ts_us"})
        tracks.sink(ev.instant(str(mark["title"]), tracks.pid, tid, float(mark["ts_us"]), args))


def _analysis_tracks(part: RankPart, tracks: Tracks) -> None:
    t = part.tables
    assert t.comm is not None and t.exposed is not None, "the task reads them (with_rows)"
    _findings(tracks, t.findings)
    path_track.draw(tracks, t.links, t.hops, part.selection.ranks)
    waits = _in_windows(peer_waits(t.comm, t.waits), part, "start_us", "end_us")
    if len(waits):
        tracks.slices("waiting for a peer", waits, _wait_name, "peer")
    if t.idle is not None and len(t.idle):
        idle = _in_windows(t.idle, part, "start_us", "end_us")
        tracks.slices("GPU idle", idle, lambda a: f"idle: {a.get('cause', '?')}", "idle")
    pieces = _in_windows(exposed_pieces(t.comm, t.exposed), part, "start_us", "end_us")
    for phase, rows in by_phase(pieces):
        tracks.slices(f"exposed {phase}", rows, _exposed_name, "exposed")


def _wait_name(args: dict[str, Any]) -> str:
    last = args.get("straggler_rank")
    return f"waits for rank {last}" if last is not None else "waits for a peer"


def _exposed_name(args: dict[str, Any]) -> str:
    unit = args.get("unit")
    return f"{unit} ({args.get('phase', 'comm')})" if unit is not None else str(args.get("kind"))


def _warnings(rank: int, dropped: Counter[str]) -> tuple[str, ...]:
    parts = [f"{n} {why}" for why, n in sorted(dropped.items()) if n]
    if not parts:
        return ()
    return (f"rank {rank}: left out of the Perfetto file: {', '.join(parts)}",)


@contextlib.contextmanager
def _no_collections() -> Iterator[None]:
    """No garbage collection while a source trace's objects live: decoded JSON holds no
    reference cycles, and the collections its millions of objects set off took a third of
    the part's time (a 32 MB trace: 2.7 -> 1.8 s, measured)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def write_part(part: RankPart, out: BinaryIO) -> PartDone:
    """Write the rank's part into ``out`` (compressed, not closing the stream)."""
    with _no_collections():
        return _write_part(part, out)


def _write_part(part: RankPart, out: BinaryIO) -> PartDone:
    writer = PartWriter(out)

    def sink(event: dict[str, Any]) -> None:
        writer.write(ev.dumps(event) + b",\n")

    doc = read_source(part.source)
    for m in _process(part, doc.distributed):
        sink(m)
    dropped = write_source(doc, part.rank, part.clock, part.selection, sink)
    del doc
    _analysis_tracks(part, Tracks(part.rank, sink))
    return PartDone(writer.close(), _warnings(part.rank, dropped))
