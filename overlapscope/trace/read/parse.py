"""Read one Kineto trace file into raw columns (no interpretation yet).

:func:`read_trace` reads the fields the analysis uses (:mod:`overlapscope.trace.read.reader`),
checks the run-level fields and leaves out unusable events. Collective arguments are read only for the few events that can carry them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from overlapscope.trace.read.decode import Columns, NotATraceError, TraceFileError
from overlapscope.trace.read.events import (
    NO_STREAM,
    bad_summary,
    gpu_activity,
    gpu_annotation,
    host_category,
)
from overlapscope.trace.read.fingerprint import Fingerprint, fingerprint
from overlapscope.trace.read.header import MAX_WORLD_SIZE, PgEntry, RunStamp, read_header
from overlapscope.trace.read.reader import BOM_SKIPPED, read_document

__all__ = [
    "MAX_WORLD_SIZE",
    "NotATraceError",
    "RawTrace",
    "TraceFileError",
    "memory_table",
    "read_trace",
]


@dataclass(frozen=True, slots=True)
class RawTrace:
    """One file's events as columns, before phases are recognised."""

    path: Path
    rank: int | None  # None: the trace has no distributedInfo
    world_size: int | None
    backend: str | None
    base_time_ns: int | None
    origin_ns: int  # absolute time of ts_us == 0 (base time + first event)
    events: pd.DataFrame  # tid, stream, on_gpu, cat, name, ts_us, dur_us, correlation
    comm_args: pd.DataFrame  # indexed like events; only rows that may be collectives
    thread_names: dict[int, str] = field(default_factory=dict)
    first_ts_us: float = 0.0  # the file's own ts of the event at ts_us == 0
    dropped: str = ""  # "3 events with a negative dur, ..." left out; "" when none
    stamp: RunStamp | None = None  # the run stamp of an ``overlapscope run`` trace
    fingerprint: Fingerprint = field(default_factory=Fingerprint)  # its job, for same_run
    # the host allocator's total (int64 bytes) after each [memory] event, at memory_us
    # (the clock of ts_us)
    memory_us: np.ndarray = field(default_factory=lambda: np.empty(0))
    memory_bytes: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    header_warnings: tuple[str, ...] = ()  # header fields left out (trace.header)
    # rows folded from point-to-point transfers (trace/recognize/p2p.py) and, per such row, the row
    # of
    # the issue range it came from (a transfer that queued behind another starts after its
    # issue range ended, so time cannot tell)
    folded_issue: tuple[np.ndarray, np.ndarray] | None = None
    groups: tuple[PgEntry, ...] = ()  # distributedInfo.pg_config (trace/groups/assign.py)

    def without_memory(self) -> RawTrace:
        """This trace without its memory curve (what a ``--dask`` client needs of it)."""
        return dataclasses.replace(self, memory_us=self.memory_us[:0],
                                   memory_bytes=self.memory_bytes[:0])  # fmt: skip


def _usable(path: Path, cols: Columns) -> np.ndarray:
    """Which complete events are kept; raises when there is none to keep."""
    if len(cols.ts) == 0:
        left = bad_summary(cols.bad, cols.others)
        raise TraceFileError(
            path,
            "empty trace: no complete ('X') events"
            + (f" (left out: {left})" if left else "")
            + "; was the profiler active for a step?",
        )
    # GPU activity needs its stream (a kernel without one would be taken for host work)
    cols.bad[(cols.bad == 0) & (cols.stream < 0) & gpu_activity(cols.cat)] = NO_STREAM
    keep: np.ndarray = cols.bad == 0
    if not keep.any():
        raise TraceFileError(
            path,
            f"malformed trace: no usable complete event ({bad_summary(cols.bad, cols.others)})",
        )
    return keep


def read_trace(path: Path) -> RawTrace:
    """Decode one ``.json`` / ``.json.gz`` Kineto trace; raise :class:`TraceFileError` with the
    file and the problem when it cannot be used."""
    obj, cols, bom = read_document(path)
    keep = _usable(path, cols)
    header = read_header(path, obj)
    ts = cols.ts
    first_ts = float(ts[keep].min())
    # A GPU annotation is a CPU range's shadow on a stream's row (torch 2.11 draws ProfilerStep,
    # nccl:* and every record_function range there): neither GPU activity nor a CPU range on a
    # thread. Kept, its stream id would pose as a thread holding a second ProfilerStep#N.
    keep = keep & ~gpu_annotation(cols.cat)
    if not keep.any():
        raise TraceFileError(
            path, "malformed trace: no usable complete event (only GPU annotations)"
        )
    dur = np.where(keep, cols.dur, 0.0)
    comm = cols.comm
    if not keep.all():
        kept_idx = np.flatnonzero(keep)
        remap = pd.Series(np.arange(len(kept_idx)), index=kept_idx)
        comm = comm.loc[comm.index.isin(kept_idx)]
        comm.index = pd.Index(remap.loc[comm.index].to_numpy(), dtype=np.int64)
    base_ns = header.base_time_ns
    origin_ns = (base_ns or 0) + round(first_ts * 1000.0)
    rows = slice(None) if keep.all() else keep  # (no copy of each column when all are kept)
    frame = pd.DataFrame(
        {
            "tid": cols.tid[rows],
            "stream": cols.stream[rows],
            "on_gpu": ((cols.stream >= 0) & ~host_category(cols.cat))[rows],
            "cat": cols.cat[rows],
            "name": cols.name[rows],
            "ts_us": ts[rows] - first_ts,
            "dur_us": dur[rows],
            "correlation": cols.correlation[rows],
        },
        copy=False,  # the columns as they are: stacking them into 2-D blocks copied them all
    )
    fp = fingerprint(frame, comm, origin_ns, timed=base_ns is not None)
    return RawTrace(
        path=path,
        rank=header.rank,
        world_size=header.world_size,
        backend=header.backend,
        base_time_ns=base_ns,
        origin_ns=origin_ns,
        events=frame,
        comm_args=comm,
        thread_names=cols.thread_names,
        first_ts_us=first_ts,
        dropped=bad_summary(cols.bad, cols.others),
        stamp=header.stamp,
        fingerprint=fp,
        memory_us=cols.memory_ts - first_ts,
        memory_bytes=cols.memory_bytes,
        header_warnings=(*header.warnings, BOM_SKIPPED) if bom else header.warnings,
        groups=header.groups,
    )


def memory_table(parts: list[tuple[int, np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """The ``[memory]`` totals of several ranks as one table (``RunTraces.memory``), from
    (rank, ts_us on the run's clock, bytes) per rank."""
    rank = [np.full(len(ts), r, dtype=np.int32) for r, ts, _ in parts]
    return pd.DataFrame({
        "rank": np.concatenate([np.empty(0, np.int32), *rank]),
        "ts_us": np.concatenate([np.empty(0), *(ts for _, ts, _ in parts)]),
        "bytes": np.concatenate([np.empty(0, np.int64), *(b for _, _, b in parts)]),
    })  # fmt: skip
