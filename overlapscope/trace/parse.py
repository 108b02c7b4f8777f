"""Read one Kineto trace file into raw columns (no interpretation yet).

:func:`read_trace` reads the fields the analysis uses (:mod:`overlapscope.trace.reader`),
checks the run-level fields and leaves out unusable events. Collective arguments are read only for the few events that can carry them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from overlapscope.trace.decode import NotATraceError, TraceFileError
from overlapscope.trace.events import bad_summary, gpu_annotation, host_category
from overlapscope.trace.reader import read_document

__all__ = ["MAX_WORLD_SIZE", "NotATraceError", "RawTrace", "TraceFileError", "read_trace"]


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
    # rows folded from point-to-point transfers (trace/p2p.py) and, per such row, the row of
    # the issue range it came from (a transfer that queued behind another starts after its
    # issue range ended, so time cannot tell)
    folded_issue: tuple[np.ndarray, np.ndarray] | None = None


MAX_WORLD_SIZE = 1 << 20  # a larger rank or world size is a corrupt field, not a run


def _distributed(path: Path, obj: dict[str, Any]) -> tuple[int | None, int | None, str | None]:
    info = obj.get("distributedInfo")
    if info is None:
        return None, None, None
    rank = info.get("rank") if isinstance(info, dict) else None
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise TraceFileError(path, "distributedInfo has no integer 'rank'; not a torch trace")
    ws = info.get("world_size")
    if isinstance(ws, bool) or not isinstance(ws, int):
        ws = None
    if not 0 <= rank < (ws if ws is not None else MAX_WORLD_SIZE) or not (
        ws is None or 1 <= ws <= MAX_WORLD_SIZE
    ):
        raise TraceFileError(
            path,
            f"distributedInfo field 'rank' {rank} / 'world_size' {ws} out of range "
            f"(0 <= rank < world_size <= {MAX_WORLD_SIZE}); the trace is corrupt: re-export it",
        )
    backend = info.get("backend")
    return rank, ws, str(backend) if backend is not None else None


def read_trace(path: Path) -> RawTrace:
    """Decode one ``.json`` / ``.json.gz`` Kineto trace; raise :class:`TraceFileError` with the
    file and the problem when it cannot be used."""
    obj, cols = read_document(path)
    if len(cols.ts) == 0:
        raise TraceFileError(
            path, "empty trace: no complete ('X') events; was the profiler active for a step?"
        )
    rank, world_size, backend = _distributed(path, obj)
    ts = cols.ts
    usable = cols.bad == 0
    if not usable.any():
        raise TraceFileError(
            path, f"malformed trace: no usable complete event ({bad_summary(cols.bad)})"
        )
    first_ts = float(ts[usable].min())
    # A GPU annotation is a CPU range's shadow on a stream's row (torch 2.11 draws ProfilerStep,
    # nccl:* and every record_function range there): neither GPU activity nor a CPU range on a
    # thread. Kept, its stream id would pose as a thread holding a second ProfilerStep#N.
    keep = usable & ~gpu_annotation(cols.cat)
    dur = np.where(keep, cols.dur, 0.0)
    comm = cols.comm
    if not keep.all():
        kept_idx = np.flatnonzero(keep)
        remap = pd.Series(np.arange(len(kept_idx)), index=kept_idx)
        comm = comm.loc[comm.index.isin(kept_idx)]
        comm.index = pd.Index(remap.loc[comm.index].to_numpy(), dtype=np.int64)
    base = obj.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, int) and not isinstance(base, bool) else None
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
    return RawTrace(
        path=path,
        rank=rank,
        world_size=world_size,
        backend=backend,
        base_time_ns=base_ns,
        origin_ns=origin_ns,
        events=frame,
        comm_args=comm,
        thread_names=cols.thread_names,
        first_ts_us=first_ts,
        dropped=bad_summary(cols.bad),
    )
