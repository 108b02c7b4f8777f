"""Read one Kineto trace file into raw columns (no interpretation yet).

:func:`read_trace` does the JSON decoding (orjson) and pulls the fields the analysis uses out
of the event dicts with list comprehensions: one pass per field, no per-row pandas work.
Collective arguments are read only for the few events that can carry them.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd
from pandas.api.types import union_categoricals

from overlapscope.errors import UserError
from overlapscope.trace.comm_args import comm_args
from overlapscope.trace.events import bad_events, bad_summary, host_category


class TraceFileError(UserError):
    """A trace file that cannot be analysed; the message names the file and the problem."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class NotATraceError(TraceFileError):
    """A readable JSON document that is not a Kineto trace (e.g. another tool's file)."""


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


def _int_column(values: list[Any], default: int) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        num = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce")
        out = num.to_numpy(dtype=np.float64, na_value=np.nan, copy=True)
        bad = ~np.isfinite(out)
        # Non-numeric ids (e.g. tid "PyTorch Profiler") get stable negative ids.
        out[bad] = [-2.0 - zlib.crc32(str(values[i]).encode()) for i in np.flatnonzero(bad)]
        return out.astype(np.int64)


def _float_column(values: list[Any]) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(
            dtype=np.float64, na_value=np.nan
        )


def _category(values: list[Any]) -> pd.Categorical:
    try:
        cat = pd.Categorical(values)
    except TypeError:  # unhashable values (a list where a string belongs)
        return pd.Categorical([str(v) for v in values])
    if any(not isinstance(c, str) for c in cat.categories):
        cat = pd.Categorical([str(v) for v in values])
    return cat


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


# torch's export_chrome_trace writes one event per indented block; splitting the events
# array at these separators lets large files be decoded a slice at a time (the Python objects
# of a whole 200 MB trace take about 8x its size).
_EVENT_SEP = b"\n  },\n  {"
CHUNK_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Chunk:
    tid: np.ndarray
    stream: np.ndarray
    correlation: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    cat: pd.Categorical
    name: pd.Categorical
    comm: pd.DataFrame  # indexed by position within the chunk's complete events
    thread_names: dict[int, str]
    bad: np.ndarray  # int8 per event: 0 valid, else 1 + index into BAD_REASONS


def _columns(events: list[Any], path: Path) -> _Chunk:
    if not all(isinstance(e, dict) for e in events):
        raise TraceFileError(path, "malformed trace: 'traceEvents' holds non-object entries")
    thread_names: dict[int, str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            a = e.get("args")
            tid = e.get("tid")
            if isinstance(a, dict) and isinstance(tid, int):
                thread_names[tid] = str(a.get("name", ""))
    complete = [e for e in events if e.get("ph") == "X"]
    raw_args = [e.get("args") for e in complete]
    args = [a if isinstance(a, dict) else None for a in raw_args]
    raw_names = [e.get("name") for e in complete]
    names = _category([n if isinstance(n, str) else "" for n in raw_names])
    ts = _float_column([e.get("ts") for e in complete])
    dur = _float_column([e.get("dur") for e in complete])
    return _Chunk(
        tid=_int_column([e.get("tid", 0) for e in complete], default=0),
        stream=_int_column(
            [a.get("stream", -1) if isinstance(a, dict) else -1 for a in args], default=-1
        ),
        correlation=_int_column(
            [a.get("correlation", -1) if isinstance(a, dict) else -1 for a in args], default=-1
        ),
        ts=ts,
        dur=dur,
        cat=_category([e.get("cat", "") for e in complete]),
        name=names,
        comm=comm_args(names, args),
        thread_names=thread_names,
        bad=bad_events(raw_names, raw_args, ts, dur),
    )


_ARGS_OPEN = b'"args": {'
_ARGS_CLOSE = b"\n    }"  # the args object closes at the event's own indentation
_KEEP_ARGS_KEYS = (b'"stream"', b'"correlation"', b'"Collective name"')
_KEEP_ARGS_NAMES = (
    b'"name": "gloo:',
    b'"name": "nccl',
    b'"name": "record_param_comms"',
    b'"ph": "M"',
)


def _needle_parts(chunk: bytes, parts: list[bytes]) -> set[int]:
    """Indices of the ``parts`` (args bodies) that follow an event named like a collective
    or a metadata event: found by scanning the chunk for the few such names."""
    hits: list[int] = []
    for needle in _KEEP_ARGS_NAMES:
        pos = chunk.find(needle)
        while pos >= 0:
            hits.append(pos)
            pos = chunk.find(needle, pos + 1)
    if not hits:
        return set()
    # parts[i] starts right after the i-th "args": { (parts[0] precedes the first one)
    starts = np.cumsum([0] + [len(p) + len(_ARGS_OPEN) for p in parts[:-1]])
    return set((np.searchsorted(starts, np.asarray(hits), side="right")).tolist())


def _slim(chunk: bytes) -> bytes:
    """Empty the ``args`` of events whose arguments the analysis never reads (shapes and
    inputs of every CPU op: most of a CPU trace's bytes), before JSON decoding. Only used
    on Kineto's indented layout; a cut that breaks the JSON makes the caller fall back to
    decoding the whole document."""
    parts = chunk.split(_ARGS_OPEN)
    keep = _needle_parts(chunk, parts)
    k0, k1, k2 = _KEEP_ARGS_KEYS
    close = _ARGS_CLOSE
    out = [parts[0]]
    for i in range(1, len(parts)):
        part = parts[i]
        end = part.find(close)
        if (
            end < 0
            or i in keep
            or part.find(k0, 0, end) >= 0
            or part.find(k1, 0, end) >= 0
            or part.find(k2, 0, end) >= 0
        ):
            out.append(part)
        else:
            out.append(part[end:])
    return _ARGS_OPEN.join(out)


def _read_bytes(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TraceFileError(path, f"cannot read ({e.strerror or e})") from e
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise TraceFileError(
                path, f"corrupt gzip ({e}); copy the file again or re-export the trace"
            ) from e
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark (editors on Windows)
        data = data[3:]
    if not data.strip():
        raise TraceFileError(path, "empty file; the profiler did not write this trace")
    return data


def _chunked(data: bytes, path: Path) -> tuple[dict[str, Any], list[_Chunk]] | None:
    """Decode a Kineto-layout file slice by slice; None when the layout is not recognised
    (the caller then decodes the whole document)."""
    key = data.find(b'"traceEvents"')
    if key < 0 or len(data) < 2 * CHUNK_BYTES or data.find(_EVENT_SEP, key) < 0:
        return None
    open_ = data.find(b"[", key)
    close = data.rfind(b"]")
    if open_ < 0 or close <= open_:
        return None
    try:
        top = orjson.loads(data[:key] + b'"traceEvents": []' + data[close + 1 :])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(top, dict):
        return None
    chunks: list[_Chunk] = []
    pos = open_ + 1
    while pos < close:
        cut = data.find(_EVENT_SEP, pos + CHUNK_BYTES, close)
        end = close if cut < 0 else cut + 4  # keep the closing "\n  }"
        try:
            events = orjson.loads(b"[" + _slim(data[pos:end]) + b"]")
        except orjson.JSONDecodeError:
            return None
        chunks.append(_columns(events, path))
        del events
        pos = close if cut < 0 else cut + 5  # skip the comma
    return top, chunks


def _union_categories(parts: list[pd.Categorical]) -> pd.Categorical:
    parts = [p for p in parts if len(p)] or parts[:1]
    try:
        return union_categoricals(parts)
    except TypeError:  # category dtypes differ (e.g. str vs object)
        return pd.Categorical(np.concatenate([np.asarray(p, dtype=object) for p in parts]))


def _concat_chunks(chunks: list[_Chunk]) -> _Chunk:
    if len(chunks) == 1:
        return chunks[0]
    offsets = np.cumsum([0] + [len(c.ts) for c in chunks])
    comm = pd.concat(
        [c.comm.set_axis(c.comm.index + off) for c, off in zip(chunks, offsets, strict=False)]
    )
    names: dict[int, str] = {}
    for c in chunks:
        names.update(c.thread_names)
    return _Chunk(
        tid=np.concatenate([c.tid for c in chunks]),
        stream=np.concatenate([c.stream for c in chunks]),
        correlation=np.concatenate([c.correlation for c in chunks]),
        ts=np.concatenate([c.ts for c in chunks]),
        dur=np.concatenate([c.dur for c in chunks]),
        cat=_union_categories([c.cat for c in chunks]),
        name=_union_categories([c.name for c in chunks]),
        comm=comm,
        thread_names=names,
        bad=np.concatenate([c.bad for c in chunks]),
    )


def _decode(data: bytes, path: Path) -> tuple[dict[str, Any], _Chunk]:
    """The top-level object (without its events) and the event columns."""
    split = _chunked(data, path)
    if split is not None:
        del data
        obj, chunks = split
        return obj, _concat_chunks(chunks)
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise TraceFileError(
            path, f"truncated or invalid JSON ({e}); the export was probably cut short"
        ) from e
    del data
    if not isinstance(obj, dict) or not isinstance(obj.get("traceEvents"), list):
        raise NotATraceError(
            path,
            "not a Kineto trace (no 'traceEvents' list); pass files written by "
            "torch.profiler's export_chrome_trace",
        )
    return obj, _columns(obj.pop("traceEvents"), path)


def read_trace(path: Path) -> RawTrace:
    """Decode one ``.json`` / ``.json.gz`` Kineto trace; raise :class:`TraceFileError` with the
    file and the problem when it cannot be used."""
    obj, cols = _decode(_read_bytes(path), path)
    if len(cols.ts) == 0:
        raise TraceFileError(
            path, "empty trace: no complete ('X') events; was the profiler active for a step?"
        )
    rank, world_size, backend = _distributed(path, obj)
    ts = cols.ts
    keep = cols.bad == 0
    if not keep.any():
        raise TraceFileError(
            path, f"malformed trace: no usable complete event ({bad_summary(cols.bad)})"
        )
    dur = np.where(keep, cols.dur, 0.0)
    comm = cols.comm
    if not keep.all():
        kept_idx = np.flatnonzero(keep)
        remap = pd.Series(np.arange(len(kept_idx)), index=kept_idx)
        comm = comm.loc[comm.index.isin(kept_idx)]
        comm.index = pd.Index(remap.loc[comm.index].to_numpy(), dtype=np.int64)
    first_ts = float(ts[keep].min())
    base = obj.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, int) and not isinstance(base, bool) else None
    origin_ns = (base_ns or 0) + round(first_ts * 1000.0)
    frame = pd.DataFrame(
        {
            "tid": cols.tid[keep],
            "stream": cols.stream[keep],
            "on_gpu": ((cols.stream >= 0) & ~host_category(cols.cat))[keep],
            "cat": cols.cat[keep],
            "name": cols.name[keep],
            "ts_us": ts[keep] - first_ts,
            "dur_us": dur[keep],
            "correlation": cols.correlation[keep],
        }
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
