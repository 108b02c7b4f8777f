"""One rank's own trace in the export: its events as the profiler wrote them, moved onto the
run's aligned clock, in the rank's process, each thread and stream on a track of its own.

Per event: ``ts`` becomes the analysis' aligned time (:class:`Clock`), ``pid`` the rank's
process, ``tid`` the track of its source (pid, tid) (:mod:`overlapscope.perfetto.events`),
an ``id`` one unique in the file; a global instant becomes the process's. Its
process metadata is replaced by the export's; its thread names are kept (with the source's
pid and tid in their args: :mod:`overlapscope.trace.read.merged` reads them back).

A thread's complete events must nest or lie apart, once in whole nanoseconds as Perfetto
reads them, or Perfetto drops them ("slice_drop_overlapping_complete_event": 312 of the
engine's ``gloo:recv`` ranges in ``traces/gpu-engine-gloo2-backward_pre``, which end after the
range around them). Such an event goes on an extra row of its thread's track, ``<name> (2)``,
that nests (:func:`_rows`); the extra rows carry the thread's source pid and tid too, and
:data:`~overlapscope.trace.read.merged.SOURCE_ROW`.

Left out, counted by reason (one warning per rank): what the loader leaves out too (a name
that is not a string, args that are not an object, a missing or non-numeric ts or dur, a
negative dur), events of no known phase, and flow arrows without both ends (Kineto writes a
kernel's end of a launch flow when the launch is outside the trace, for instance): the file's
every flow pairs up. With ``--steps``, events outside the chosen steps' windows, and the
``ProfilerStep#N`` ranges of the other steps (a neighbouring step's range that reaches into a
window would read back as a fragment of that step; its events stay, outside any step).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from overlapscope.perfetto.events import ADDED, flow_id, rank_pid, thread_names, track_tid
from overlapscope.perfetto.select import Selection, overlaps
from overlapscope.trace.naming.generic import STEP_RE
from overlapscope.trace.read.events import HOST_CATEGORIES
from overlapscope.trace.read.merged import SOURCE_PID, SOURCE_ROW, SOURCE_TID
from overlapscope.trace.read.reader import read_text

PHASES = frozenset("XBEiIbneSTFstfCNODPMRcv()")
FLOW_PHASES = frozenset("stf")
# Process metadata of the source (the rank's process is the export's).
PROCESS_METADATA = frozenset(
    ("process_name", "process_labels", "process_sort_index", "process_uptime_seconds")
)
Sink = Callable[[dict[str, Any]], None]


@dataclass(frozen=True, slots=True)
class Clock:
    """How a rank's file time becomes the run's aligned time: the loader's
    ``ts_us = file ts - ts_offset_us``, then the analysis' clock offset subtracted
    (``offset_us + drift_ppm * 1e-6 * (ts_us - center_us)``, where ``applied``)."""

    ts_offset_us: float
    offset_us: float = 0.0
    drift_ppm: float = 0.0
    center_us: float = 0.0
    applied: bool = False

    def aligned(self, file_ts: float) -> float:
        t = file_ts - self.ts_offset_us
        if not self.applied:
            return t
        return t - (self.offset_us + self.drift_ppm * 1e-6 * (t - self.center_us))


_NUMBERS = (int, float)


def _number(value: Any) -> bool:
    """A finite JSON number (not a bool): ``v - v`` is 0 for those only."""
    return type(value) in _NUMBERS and value - value == 0


def _problem(e: Any) -> str | None:
    """Why an event is left out (None: it is kept)."""
    if type(e) is not dict:
        return "entries that are not objects"
    ph = e.get("ph")
    if ph == "X" and _number(e.get("ts")) and _number(e.get("dur")) and e["dur"] >= 0:
        return _labels(e)  # (the common case first)
    if type(ph) is not str or ph not in PHASES:
        return "events of no known phase"
    if ph == "M":
        return None
    if not _number(e.get("ts")):
        return "events with a missing or non-numeric ts"
    if ph == "X":
        return "events with a missing, negative or non-numeric dur"
    return _labels(e)


def _labels(e: dict[str, Any]) -> str | None:
    if type(e.get("name", "")) is not str:
        return "events whose name is not a string"
    if "args" in e and type(e["args"]) is not dict:
        return "events whose args are not an object"
    if type(e.get("pid")) in (dict, list) or type(e.get("tid")) in (dict, list):
        return "events whose pid or tid is not a number or a string"
    return None


def _is_gpu(e: dict[str, Any]) -> bool:
    args = e.get("args")
    return (
        isinstance(args, dict)
        and "stream" in args
        and str(e.get("cat", "")).lower() not in HOST_CATEGORIES
    )


def _key(value: Any) -> tuple[int, float, str]:
    """Sorts numbers before strings, each in their order."""
    if _number(value):
        return (0, float(value), "")
    return (1, 0.0, str(value))


@dataclass
class _Rank:
    """One rank's source being written."""

    rank: int
    clock: Clock
    selection: Selection
    dropped: Counter[str]
    tracks: dict[tuple[Any, Any], int]
    flows: dict[tuple[Any, Any], int]
    extra: set[int]  # id() of the flow finishes after a flow's first (left out)
    rows: dict[int, int]  # id() of a complete event on an extra row of its track: that row
    row_tracks: dict[tuple[Any, Any, int], int]  # (pid, tid, row): its track index

    def kept(self, e: dict[str, Any]) -> bool:
        windows = self.selection.windows
        if e["ph"] in "BE" or windows is None:
            return True
        ts = self.clock.aligned(e["ts"])
        return overlaps(windows, ts, ts + (e.get("dur") or 0.0)) and not self._other_step(e)

    def _other_step(self, e: dict[str, Any]) -> bool:
        """Whether ``e`` is the ``ProfilerStep#N`` range of a step not chosen."""
        name = e.get("name", "")
        if not name.startswith("ProfilerStep"):
            return False
        step = STEP_RE.match(name)
        return step is not None and not self.selection.has_step(int(step.group(1)))


def _tracks(events: list[dict[str, Any]], rank: int) -> dict[tuple[Any, Any], int]:
    """Each (pid, tid) of the source: its track index, the CPU threads first, then the
    GPU streams (a stream is a tid whose events are GPU activity)."""
    gpu: dict[tuple[Any, Any], bool] = {}
    for e in events:
        key = (e.get("pid"), e.get("tid"))
        if e["ph"] != "M" and not gpu.get(key, False):
            gpu[key] = _is_gpu(e)
    order = sorted(gpu, key=lambda k: (gpu[k], _key(k[0]), _key(k[1])))
    if len(order) > ADDED:
        track_tid(rank, len(order) + ADDED)  # raises, naming the rank
    return {k: i for i, k in enumerate(order)}


def _nanoseconds(us: float) -> int:
    return round(us * 1000.0)  # (as Perfetto reads a JSON time)


def _rows(events: list[dict[str, Any]], state: _Rank) -> None:
    """Each kept complete event that would overlap another of its thread in part: the row
    of its thread's track where it nests (the lowest, from 1), in ``state.rows``; each extra
    row, in ``state.row_tracks`` (track indices after the source's)."""
    spans: dict[tuple[Any, Any], list[tuple[int, int, int]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X" and state.kept(e):
            start = _nanoseconds(state.clock.aligned(e["ts"]))
            spans[(e.get("pid"), e.get("tid"))].append((start, _nanoseconds(e["dur"]), id(e)))
    for key in sorted(spans, key=state.tracks.__getitem__):
        stacks: list[list[int]] = []  # per row, the ends of the slices open there
        for start, dur, ident in sorted(spans[key], key=lambda s: (s[0], -s[1])):
            end = start + dur
            row = len(stacks)  # (a new row, unless one of those open takes it)
            for r, stack in enumerate(stacks):
                while stack and stack[-1] <= start:
                    stack.pop()
                if not stack or end <= stack[-1]:
                    row = r
                    break
            if row == len(stacks):
                stacks.append([])
            stacks[row].append(end)
            if row:
                state.rows[ident] = row
                at = (key[0], key[1], row)
                if at not in state.row_tracks:
                    state.row_tracks[at] = len(state.tracks) + len(state.row_tracks)
    if len(state.tracks) + len(state.row_tracks) > ADDED:
        track_tid(state.rank, len(state.tracks) + len(state.row_tracks) + ADDED)  # raises


def _paired_flows(events: list[dict[str, Any]], state: _Rank) -> dict[tuple[Any, Any], int]:
    """The flows kept whole: one start, then at least one finish; the first finish after
    the start ends it (later ones, and every end of a flow without both, are counted)."""
    starts: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    finishes: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    steps: Counter[tuple[Any, Any]] = Counter()  # "t" events
    for e in events:
        ph = e["ph"]
        if ph in FLOW_PHASES and state.kept(e):
            key = (e.get("cat"), e.get("id"))
            if ph == "s":
                starts[key].append(e)
            elif ph == "f":
                finishes[key].append(e)
            else:
                steps[key] += 1
    flows: dict[tuple[Any, Any], int] = {}
    for key in [*starts, *(k for k in finishes if k not in starts)]:
        begun, ended = starts.get(key, []), finishes.get(key, [])
        first = min(ended, key=lambda e: e["ts"]) if ended else None
        if len(begun) == 1 and first is not None and first["ts"] >= begun[0]["ts"]:
            flows[key] = flow_id(state.rank, len(flows))
            state.extra.update(id(e) for e in ended if e is not first)
            state.dropped["flow finishes after a flow's first"] += len(ended) - 1
        else:
            state.dropped["flow events without both a start and a finish"] += (
                len(begun) + len(ended) + steps[key]
            )
    return flows


def _moved(e: dict[str, Any], state: _Rank, ids: dict[tuple[Any, Any], int]) -> dict[str, Any]:
    """The event in the rank's process, on the aligned clock."""
    out = dict(e)
    out["pid"] = rank_pid(state.rank)
    key = (e.get("pid"), e.get("tid"))
    row = state.rows.get(id(e), 0)
    index = state.row_tracks[(key[0], key[1], row)] if row else state.tracks[key]
    out["tid"] = track_tid(state.rank, index)
    out["ts"] = state.clock.aligned(e["ts"])
    if "id" in e:
        key = (e.get("cat"), e["id"])
        if key not in ids:
            ids[key] = flow_id(state.rank, len(ids))
        out["id"] = ids[key]
    if e["ph"] in "iI" and e.get("s") == "g":
        out["s"] = "p"  # a global instant of one rank: its process's
    return out


def _names(events: Iterable[dict[str, Any]], state: _Rank, sink: Sink) -> None:
    """The source's thread names on their tracks (every name it gave, in order), a name for
    each track it did not name, then each extra row's: its thread's last name, ``(2)``..."""
    named: dict[tuple[Any, Any], str] = {}
    for e in events:
        key = (e.get("pid"), e.get("tid"))
        if e["ph"] == "M" and e.get("name") == "thread_name" and key in state.tracks:
            args = e["args"] if isinstance(e.get("args"), dict) else {}
            name = args.get("name")
            named[key] = name if isinstance(name, str) and name else _unnamed(key)
            _thread(state, key, named[key], sink)
    for key in state.tracks:
        if key not in named:
            _thread(state, key, _unnamed(key), sink)
    for (pid, tid, row), index in state.row_tracks.items():
        name = f"{named.get((pid, tid), _unnamed((pid, tid)))} ({row + 1})"
        source = {SOURCE_PID: pid, SOURCE_TID: tid, SOURCE_ROW: row + 1}
        base = state.tracks[(pid, tid)]
        tid_out = track_tid(state.rank, index)
        for m in thread_names(rank_pid(state.rank), tid_out, name, base, source):
            sink(m)


def _unnamed(key: tuple[Any, Any]) -> str:
    return f"thread {key[1]} (pid {key[0]})"


def _thread(state: _Rank, key: tuple[Any, Any], name: str, sink: Sink) -> None:
    index = state.tracks[key]
    source = {SOURCE_PID: key[0], SOURCE_TID: key[1]}
    for m in thread_names(rank_pid(state.rank), track_tid(state.rank, index), name, index, source):
        sink(m)


@dataclass
class SourceDoc:
    """A rank's source trace, read: its usable events, its ``distributedInfo`` and what
    was left out of it (by reason)."""

    events: list[dict[str, Any]]
    distributed: dict[str, Any] | None
    dropped: Counter[str]


def read_source(path: Path) -> SourceDoc:
    doc = orjson.loads(read_text(path))
    raw = doc.get("traceEvents", []) if isinstance(doc, dict) else []
    info = doc.get("distributedInfo") if isinstance(doc, dict) else None
    del doc
    dropped: Counter[str] = Counter()
    events = []
    for e in raw:
        why = _problem(e)
        if why is None:
            events.append(e)
        else:
            dropped[why] += 1
    return SourceDoc(events, info if isinstance(info, dict) else None, dropped)


def write_source(
    doc: SourceDoc,
    rank: int,
    clock: Clock,
    selection: Selection,
    sink: Sink,
) -> Counter[str]:
    """Send the rank's source events to ``sink``, moved (module doc); what was left out,
    by reason."""
    events = doc.events
    state = _Rank(rank, clock, selection, doc.dropped, _tracks(events, rank), {}, set(), {}, {})
    _rows(events, state)
    _names(events, state, sink)
    state.flows = _paired_flows(events, state)
    ids = dict(state.flows)
    for e in events:
        ph = e["ph"]
        if ph == "M" or id(e) in state.extra or not state.kept(e):
            continue
        if ph in FLOW_PHASES and (e.get("cat"), e.get("id")) not in state.flows:
            continue
        sink(_moved(e, state, ids))
    return state.dropped
