"""Decode a trace document into the event columns the analysis reads.

The document is decoded with msgspec into the Structs of :mod:`overlapscope.trace.read.fields`,
which declare only the fields used: every other key is skipped while parsing, and no dict is
built per event (:mod:`overlapscope.trace.read.reader` feeds large files a slice of events at a
time). Values follow orjson's reading of the document, as before this decoder: a document
msgspec refuses is read again with orjson, which either gives the error the user sees
(:mod:`overlapscope.trace.read.json_error`: truncated, or invalid JSON at a byte and event) or a
document msgspec then decodes; integers orjson reads as floats (beyond 64 bits) are read as
floats where a column is built.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson
import pandas as pd

from overlapscope.errors import UserError
from overlapscope.trace.read.columns import (
    Strings,
    float_column,
    int_column,
    odd_types,
    strings,
)
from overlapscope.trace.read.comm_args import COMM_FIELDS, add_comm_rows, comm_frame, is_comm_name
from overlapscope.trace.read.events import (
    BAD_MEMORY,
    BAD_THREAD_NAME,
    MAX_TS_US,
    MEMORY_EVENT,
    NO_PHASE,
    NOT_AN_OBJECT,
    bad_events,
)
from overlapscope.trace.read.fields import (
    BY_PHASE,
    EVENTS,
    HEADER_FIELDS,
    NO_MEMORY,
    OUTLINE,
    PHASES,
    TRACE,
    Args,
    Complete,
    Event,
    EventArgs,
    Instant,
    MemoryArgs,
    Metadata,
    Outline,
    Trace,
    orjson_number,
)
from overlapscope.trace.read.json_error import describe


class TraceFileError(UserError):
    """A trace file that cannot be analysed; the message names the file and the problem."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class NotATraceError(TraceFileError):
    """A readable JSON document that is not a Kineto trace (e.g. another tool's file)."""


@dataclass(frozen=True, slots=True)
class Columns:
    """The complete (``ph: "X"``) events of a document as columns."""

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
    others: dict[str, int]  # entries left out before they were complete events, by reason
    memory_ts: np.ndarray  # the host allocator's [memory] events: their ts (file's clock)
    memory_bytes: np.ndarray  # and its Total Allocated after each, int64


def _thread_names(metadata: list[Any], others: Counter[str]) -> dict[int, str]:
    """Thread names from the metadata (``ph: "M"``) events; a ``thread_name`` record without
    an integer tid and a non-empty string ``args.name`` is counted in ``others``."""
    names: dict[int, str] = {}
    for e in metadata:
        if e.name == "thread_name":
            name = e.args.name if isinstance(e.args, Args) else None
            if type(orjson_number(e.tid)) is int and type(name) is str and name:
                names[e.tid] = name
            else:
                others[BAD_THREAD_NAME] += 1
    return names


def _ids(fields: list[Any]) -> tuple[list[Any], list[Any]]:
    """The GPU stream and correlation id of each event's ``args`` (an Args, or None: -1)."""
    return (
        [-1 if a is None else a.stream for a in fields],
        [-1 if a is None else a.correlation for a in fields],
    )


def _args(fields: list[Any]) -> tuple[list[Any], np.ndarray, tuple[list[Any], list[Any]]]:
    """The events' ``args`` (None where not an object), which are not an object, and their
    GPU streams and correlation ids (:func:`_ids`)."""
    try:  # (any value but an Args or None has no attribute: no pass to find them first)
        return fields, np.zeros(len(fields), dtype=bool), _ids(fields)
    except AttributeError:  # args that are not an object: left out as None
        odd = odd_types(fields, Args, EventArgs, type(None))
        fields = [a if isinstance(a, Args) else None for a in fields]
        return fields, odd, _ids(fields)


def _of_phase(
    events: list[Any], by_phase: bool, cls: type[Complete | Metadata | Instant]
) -> list[Any]:
    """The events of ``cls``'s phase: by their type when decoded by :data:`BY_PHASE`, else
    by their ``ph``."""
    if by_phase:
        return [e for e in events if type(e) is cls]
    return [e for e in events if e.ph == cls.ph]


_NUMERIC = ("tid", "stream", "correlation", "ts", "dur", "bad")


class EventColumns:
    """Builds the :class:`Columns` of a document from its events, one slice of the events
    array at a time (:meth:`add`) or all at once."""

    def __init__(self) -> None:
        self.names, self.cats = Strings(), Strings()
        self.numeric: dict[str, list[np.ndarray]] = {k: [] for k in _NUMERIC}
        self.comm_name: list[bool] = []  # per name code: may carry collective arguments
        self.comm_idx: list[np.ndarray] = []
        self.comm_rows: dict[str, list[Any]] = {k: [] for k in COMM_FIELDS}
        self.tensor_bytes: dict[tuple[bytes, bytes], tuple[int, int, int, int]] = {}
        self.thread_names: dict[int, str] = {}
        self.num_events = 0
        self.others: Counter[str] = Counter()  # entries that are no complete event, by reason
        self.memory_ts: list[np.ndarray] = []
        self.memory_bytes: list[np.ndarray] = []

    def add_slice(self, text: bytearray, lo: int, hi: int) -> None:
        """Add the run of events ``text[lo + 1 : hi - 1]`` cut from an events array
        (``{...},\n  {...}``), with the byte on either side of it (a comma or the array's
        bracket): these are set to brackets while it is decoded in place, then restored (a
        bracketed copy of every slice cost ~10 ms per 56 MB, measured). Nothing decoded
        outlives :meth:`add`, which reads the raw tensor lists."""
        first, last = text[lo], text[hi - 1]
        text[lo], text[hi - 1] = 0x5B, 0x5D  # [ ]
        by_phase = True
        try:
            try:
                events: list[Any] = BY_PHASE.decode(memoryview(text)[lo:hi])
            except msgspec.DecodeError:  # an odd phase (or JSON EVENTS refuses as well)
                events, by_phase = EVENTS.decode(memoryview(text)[lo:hi]), False
        finally:
            text[lo], text[hi - 1] = first, last
        self.add(events, by_phase)

    def add(self, events: list[Any], by_phase: bool = False) -> None:
        """Add decoded events: :class:`Event` s, or (``by_phase``) the classes of
        :data:`BY_PHASE`, told apart by their type (half the CPU of reading ``ph``)."""
        complete = _of_phase(events, by_phase, Complete)
        if not by_phase:  # (BY_PHASE decodes only events of the format's phases)
            self.others[NO_PHASE] += sum(
                type(e.ph) is not str or e.ph not in PHASES for e in events
            )
        codes, odd_names = strings(self.names, [e.name for e in complete])
        fields, odd_args, ids = _args([e.args for e in complete])
        self._add_comm(codes, fields)
        # (decoded by phase, the keys' types are msgspec's checked ones: no pass over them)
        ts = float_column([e.ts for e in complete], checked=by_phase)
        dur = float_column([e.dur for e in complete], checked=by_phase)
        _, odd_cats = strings(self.cats, [e.cat for e in complete])
        odd_tids: list[np.ndarray] = []
        tids = int_column([e.tid for e in complete], None if by_phase else odd_tids)
        none = np.zeros(len(complete), dtype=bool)
        odd = (odd_names, odd_cats, odd_tids[0] if odd_tids else none, odd_args)
        if len(complete) < len(events):  # (a pass over the events: only where some are not)
            self.thread_names.update(
                _thread_names(_of_phase(events, by_phase, Metadata), self.others)
            )
            self._add_memory(_of_phase(events, by_phase, Instant))
        for key, column in (
            ("tid", tids),
            ("stream", int_column(ids[0])),
            ("correlation", int_column(ids[1])),
            ("ts", ts),
            ("dur", dur),
            ("bad", bad_events(odd, ts, dur)),
        ):
            self.numeric[key].append(column)
        self.num_events += len(complete)

    def _add_memory(self, instants: list[Any]) -> None:
        """The host allocator's total after each ``[memory]`` event (Device Type 0, CPU);
        one without a numeric ts or an integer Total Allocated is counted, left out."""
        mem = [e for e in instants if e.name == MEMORY_EVENT]
        if not mem:
            return
        args = [e.args if isinstance(e.args, (MemoryArgs, EventArgs)) else NO_MEMORY for e in mem]
        total = [a.total_allocated for a in args]
        ts = float_column([e.ts for e in mem])
        with np.errstate(invalid="ignore"):
            bad = odd_types(total, int) | ~(np.abs(ts) <= MAX_TS_US)
        self.others[BAD_MEMORY] += int(bad.sum())
        device = int_column([a.device_type for a in args])
        keep = ~bad & (device == 0)
        self.memory_ts.append(ts[keep])
        self.memory_bytes.append(float_column(total)[keep].astype(np.int64))

    def _add_comm(self, codes: np.ndarray, fields: list[Any]) -> None:
        new = list(itertools.islice(self.names.index, len(self.comm_name), None))
        self.comm_name += [is_comm_name(n) for n in new]
        rows = np.flatnonzero(np.asarray(self.comm_name, dtype=bool)[codes])
        self.comm_idx.append(rows + self.num_events)
        add_comm_rows(self.comm_rows, [fields[i] for i in rows], self.tensor_bytes)

    def finish(self) -> Columns:
        num = {k: np.concatenate(v) if v else np.empty(0) for k, v in self.numeric.items()}
        idx = np.concatenate(self.comm_idx) if self.comm_idx else np.empty(0, np.int64)
        return Columns(
            tid=num["tid"].astype(np.int64),
            stream=num["stream"].astype(np.int64),
            correlation=num["correlation"].astype(np.int64),
            ts=num["ts"],
            dur=num["dur"],
            cat=self.cats.categorical(),
            name=self.names.categorical(),
            comm=comm_frame(self.comm_rows, idx),
            thread_names=self.thread_names,
            bad=num["bad"].astype(np.int8),
            others=dict(self.others),
            memory_ts=np.concatenate(self.memory_ts) if self.memory_ts else np.empty(0),
            memory_bytes=(
                np.concatenate(self.memory_bytes) if self.memory_bytes else np.empty(0, np.int64)
            ),
        )


# What makes the fast path give way to orjson's reading: msgspec's refusal, or a number
# orjson refuses (an integer beyond the float range) in a field the analysis reads.
_REFUSED = (msgspec.DecodeError, OverflowError, orjson.JSONDecodeError)


def _columns(events: list[Event], not_objects: int = 0) -> Columns:
    build = EventColumns()
    build.others[NOT_AN_OBJECT] += not_objects
    build.add(events)
    return build.finish()


# A whole document larger than twice this is decoded this many bytes of events at a time.
BATCH_BYTES = 2 * 1024 * 1024


def _batched(events: list[msgspec.Raw]) -> Columns:
    """The columns of events left raw, decoded a batch at a time: only one batch's objects
    exist at once (all of them took ~1.5x a compact 20 MB file, measured)."""
    build = EventColumns()
    if not events:
        build.add([])
        return build.finish()
    ends = np.cumsum(np.fromiter(map(len, events), dtype=np.int64, count=len(events)))
    cuts = np.searchsorted(ends, np.arange(BATCH_BYTES, int(ends[-1]), BATCH_BYTES))
    for lo, hi in itertools.pairwise([0, *np.unique(cuts).tolist(), len(events)]):
        if hi > lo:
            build.add(EVENTS.decode(b"".join((b"[", b",".join(events[lo:hi]), b"]"))))
    return build.finish()


def _top(doc: Trace | Outline) -> dict[str, Any]:
    """The header fields the document holds (:data:`HEADER_FIELDS`), as orjson reads them."""
    return {
        key: orjson.loads(bytes(raw))
        for key, attr in HEADER_FIELDS.items()
        if (raw := getattr(doc, attr)) is not msgspec.UNSET
    }


def _strict(data: bytes | bytearray, path: Path) -> tuple[dict[str, Any], Columns]:
    """Read a document msgspec refused with orjson: its error for the user, or the document
    re-encoded for msgspec."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise TraceFileError(path, describe(data, e.pos, e.msg)) from e
    del data
    if not isinstance(obj, dict) or not isinstance(obj.get("traceEvents"), list):
        raise NotATraceError(
            path,
            "not a Kineto trace (no 'traceEvents' list); pass files written by "
            "torch.profiler's export_chrome_trace",
        )
    events = obj["traceEvents"]
    objects = [e for e in events if isinstance(e, dict)]  # the rest: counted, left out
    not_objects = len(events) - len(objects)
    if not_objects:
        obj["traceEvents"] = objects
    doc = TRACE.decode(orjson.dumps(obj))
    del obj, events, objects
    return _top(doc), _columns(doc.traceEvents, not_objects)


def decode(data: bytes | bytearray, path: Path) -> tuple[dict[str, Any], Columns]:
    """The top-level fields the analysis reads (``distributedInfo``,
    ``baseTimeNanoseconds``) and the event columns of a whole document; raises
    :class:`TraceFileError` naming ``path`` when it is not a usable trace."""
    try:
        if len(data) < 2 * BATCH_BYTES:
            doc = TRACE.decode(data)
            return _top(doc), _columns(doc.traceEvents)
        outline = OUTLINE.decode(data)
        return _top(outline), _batched(outline.traceEvents)
    except _REFUSED:
        return _strict(data, path)
