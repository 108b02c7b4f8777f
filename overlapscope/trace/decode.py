"""Decode a trace document into the event columns the analysis reads.

The document is decoded with msgspec into the Structs of :mod:`overlapscope.trace.fields`,
which declare only the fields used: every other key is skipped while parsing, and no dict is
built per event. Kineto's indented layout is decoded a slice of events at a time, so only one
slice's objects exist at once (the Python objects of a whole trace take several times its
size). Values follow orjson's reading of the document, as before this decoder: a document
msgspec refuses is read again with orjson, which either gives the error the user sees
(``truncated or invalid JSON ...``) or a document msgspec then decodes; integers orjson reads
as floats (beyond 64 bits) are read as floats where a column is built.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson
import pandas as pd
from pandas.api.types import union_categoricals

from overlapscope.errors import UserError
from overlapscope.trace.comm_args import comm_args
from overlapscope.trace.events import bad_events
from overlapscope.trace.fields import EVENTS, TRACE, Args, Event, orjson_number


class TraceFileError(UserError):
    """A trace file that cannot be analysed; the message names the file and the problem."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class NotATraceError(TraceFileError):
    """A readable JSON document that is not a Kineto trace (e.g. another tool's file)."""


def _int_column(values: list[Any]) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        values = [orjson_number(v) for v in values]
        num = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce")
        out = num.to_numpy(dtype=np.float64, na_value=np.nan, copy=True)
        bad = ~np.isfinite(out)
        # Non-numeric ids (e.g. tid "PyTorch Profiler") get stable negative ids.
        out[bad] = [-2.0 - zlib.crc32(str(values[i]).encode()) for i in np.flatnonzero(bad)]
        with np.errstate(invalid="ignore"):  # a float beyond int64 (1e308): garbage, not a warning
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
        return pd.Categorical([str(orjson_number(v)) for v in values])
    if any(not isinstance(c, str) for c in cat.categories):
        cat = pd.Categorical([str(orjson_number(v)) for v in values])
    return cat


@dataclass(frozen=True, slots=True)
class Columns:
    """The complete (``ph: "X"``) events of a document, or of a slice of it, as columns."""

    tid: np.ndarray
    stream: np.ndarray
    correlation: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    cat: pd.Categorical
    name: pd.Categorical
    comm: pd.DataFrame  # indexed by position within the complete events
    thread_names: dict[int, str]
    bad: np.ndarray  # int8 per event: 0 valid, else 1 + index into BAD_REASONS


def _thread_names(events: list[Event]) -> dict[int, str]:
    names: dict[int, str] = {}
    for e in events:
        if e.ph == "M" and e.name == "thread_name":
            a, tid = e.args, orjson_number(e.tid)
            if isinstance(a, Args) and isinstance(tid, int):
                names[tid] = str(orjson_number(a.name))
    return names


def columns(events: list[Event]) -> Columns:
    """The columns of the complete events among ``events``."""
    complete = [e for e in events if e.ph == "X"]
    args = [e.args for e in complete]
    fields = [a if type(a) is Args else None for a in args]
    raw_names = [e.name for e in complete]
    names = _category([n if isinstance(n, str) else "" for n in raw_names])
    ts = _float_column([e.ts for e in complete])
    dur = _float_column([e.dur for e in complete])
    odd_args = np.fromiter(
        (a is not None and f is None for a, f in zip(args, fields, strict=True)),
        dtype=bool,
        count=len(args),
    )
    return Columns(
        tid=_int_column([e.tid for e in complete]),
        stream=_int_column([-1 if f is None else f.stream for f in fields]),
        correlation=_int_column([-1 if f is None else f.correlation for f in fields]),
        ts=ts,
        dur=dur,
        cat=_category([e.cat for e in complete]),
        name=names,
        comm=comm_args(names, fields),
        thread_names=_thread_names(events),
        bad=bad_events(raw_names, odd_args, ts, dur),
    )


# What makes the fast path give way to orjson's reading: msgspec's refusal, or a number
# orjson refuses (an integer beyond the float range) in a field the analysis reads.
_REFUSED = (msgspec.DecodeError, OverflowError, orjson.JSONDecodeError)

# torch's export_chrome_trace writes one event per indented block; splitting the events
# array at these separators lets large files be decoded a slice at a time.
_EVENT_SEP = b"\n  },\n  {"
CHUNK_BYTES = 8 * 1024 * 1024


def _chunked(data: bytes) -> tuple[dict[str, Any], list[Columns]] | None:
    """Decode a Kineto-layout document slice by slice; None when the layout is not
    recognised or a slice does not decode (the caller then decodes the whole document)."""
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
    chunks: list[Columns] = []
    view = memoryview(data)
    pos = open_ + 1
    while pos < close:
        cut = data.find(_EVENT_SEP, pos + CHUNK_BYTES, close)
        end = close if cut < 0 else cut + 4  # keep the closing "\n  }"
        try:
            events = EVENTS.decode(b"".join((b"[", view[pos:end], b"]")))
            chunks.append(columns(events))
        except _REFUSED:
            return None
        del events
        pos = close if cut < 0 else cut + 5  # skip the comma
    return top, chunks


def _union_categories(parts: list[pd.Categorical]) -> pd.Categorical:
    parts = [p for p in parts if len(p)] or parts[:1]
    try:
        return union_categoricals(parts)
    except TypeError:  # category dtypes differ (e.g. str vs object)
        return pd.Categorical(np.concatenate([np.asarray(p, dtype=object) for p in parts]))


def _concat(chunks: list[Columns]) -> Columns:
    if len(chunks) == 1:
        return chunks[0]
    offsets = np.cumsum([0] + [len(c.ts) for c in chunks])
    comm = pd.concat(
        [c.comm.set_axis(c.comm.index + off) for c, off in zip(chunks, offsets, strict=False)]
    )
    names: dict[int, str] = {}
    for c in chunks:
        names.update(c.thread_names)
    return Columns(
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


def _top(distributed: msgspec.Raw, base: msgspec.Raw) -> dict[str, Any]:
    return {
        "distributedInfo": orjson.loads(bytes(distributed)),
        "baseTimeNanoseconds": orjson.loads(bytes(base)),
    }


def _strict(data: bytes, path: Path) -> tuple[dict[str, Any], Columns]:
    """Read a document msgspec refused with orjson: its error for the user, or the document
    re-encoded for msgspec."""
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
    if not all(isinstance(e, dict) for e in obj["traceEvents"]):
        raise TraceFileError(path, "malformed trace: 'traceEvents' holds non-object entries")
    doc = TRACE.decode(orjson.dumps(obj))
    del obj
    return _top(doc.distributedInfo, doc.baseTimeNanoseconds), columns(doc.traceEvents)


def decode(data: bytes, path: Path) -> tuple[dict[str, Any], Columns]:
    """The top-level fields the analysis reads (``distributedInfo``,
    ``baseTimeNanoseconds``) and the event columns of a document; raises
    :class:`TraceFileError` naming ``path`` when it is not a usable trace."""
    split = _chunked(data)
    if split is not None:
        del data
        top, chunks = split
        return top, _concat(chunks)
    try:
        doc = TRACE.decode(data)
        return _top(doc.distributedInfo, doc.baseTimeNanoseconds), columns(doc.traceEvents)
    except _REFUSED:
        return _strict(data, path)
