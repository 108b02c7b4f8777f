"""What makes a file a Chrome trace that Perfetto and chrome://tracing open as drawn, checked
on the file itself (no viewer runs here: docs/PERFETTO.md says how it was looked at).

* one gzip member (DevTools' Compression Streams refuse data after the first) holding one
  JSON document with a ``traceEvents`` list;
* every event an object with a known ``ph``, an integer ``pid`` and ``tid`` and a finite
  ``ts`` (a metadata event may have none); a complete event (``X``) a finite ``dur >= 0``;
* one process per pid with a name; a tid in one process only (Perfetto keys threads by tid);
  every thread that holds an event has a name;
* every flow (``s``/``f`` by ``cat`` and ``id``) has one start and one finish, the start no
  later, each inside a slice of its own thread (where both viewers bind it);
* overlapscope's own tracks hold slices that never overlap in part; on every track, the
  complete events nest or lie apart once in whole nanoseconds, as Perfetto reads them (it
  drops the others: "slice_drop_overlapping_complete_event").
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PHASES = set("XBEiIbneSTFstfCNODPMRcv()")
OURS = "overlapscope"


@dataclass
class Trace:
    """The file, read: its top level, its events, and names by pid and (pid, tid)."""

    top: dict[str, Any]
    events: list[dict[str, Any]]
    processes: dict[int, dict[str, Any]] = field(default_factory=dict)  # pid -> args
    threads: dict[tuple[int, int], str] = field(default_factory=dict)
    thread_args: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)

    def of_pid(self, pid: int) -> list[dict[str, Any]]:
        return [e for e in self.events if e["pid"] == pid]

    def ours(self, name_part: str) -> list[dict[str, Any]]:
        """The slices of overlapscope's tracks whose name holds ``name_part``."""
        return [
            e
            for e in self.events
            if e["ph"] == "X"
            and e.get("cat") == OURS
            and name_part in self.threads[(e["pid"], e["tid"])]
        ]


def _one_member(data: bytes) -> bytes:
    d = zlib.decompressobj(31)
    text = d.decompress(data) + d.flush()
    assert d.eof and not d.unused_data, "not exactly one gzip member"
    assert text == gzip.decompress(data)
    return text


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_event(e: Any) -> None:
    assert isinstance(e, dict), e
    assert e.get("ph") in PHASES, e
    assert isinstance(e.get("pid"), int) and not isinstance(e["pid"], bool), e
    assert isinstance(e.get("tid"), int) and not isinstance(e["tid"], bool), e
    assert _finite(e.get("ts")) or (e["ph"] == "M" and "ts" not in e), e
    if e["ph"] == "X":
        assert _finite(e.get("dur")) and e["dur"] >= 0, e


def _names(trace: Trace) -> None:
    owner: dict[int, int] = {}
    for e in trace.events:
        if e["ph"] != "M":
            assert e["pid"] in trace.processes, f"event of an unnamed process: {e}"
        assert owner.setdefault(e["tid"], e["pid"]) == e["pid"], f"tid in two processes: {e}"
        if e["ph"] == "M" and e["name"] == "thread_name":
            trace.threads[(e["pid"], e["tid"])] = e["args"]["name"]
            trace.thread_args[(e["pid"], e["tid"])] = e["args"]
    for e in trace.events:
        if e["ph"] != "M":
            assert (e["pid"], e["tid"]) in trace.threads, f"event of an unnamed thread: {e}"


def _slices(trace: Trace) -> dict[tuple[int, int], list[tuple[float, float]]]:
    out: defaultdict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in trace.events:
        if e["ph"] == "X":
            out[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    return out


def _inside(spans: list[tuple[float, float]], ts: float) -> bool:
    return any(a <= ts < b for a, b in spans)


def check_flows(trace: Trace) -> int:
    """Every flow pairs up and binds to a slice at both ends; the number of flows."""
    ends: defaultdict[tuple[Any, Any], Counter[str]] = defaultdict(Counter)
    start_ts: dict[tuple[Any, Any], float] = {}
    finish_ts: dict[tuple[Any, Any], float] = {}
    slices = _slices(trace)
    for e in trace.events:
        if e["ph"] in "sf":
            key = (e.get("cat"), e["id"])
            ends[key][e["ph"]] += 1
            (start_ts if e["ph"] == "s" else finish_ts)[key] = e["ts"]
            if e.get("cat", "").startswith(OURS):
                assert _inside(slices[(e["pid"], e["tid"])], e["ts"]), f"unbound: {e}"
    for key, count in ends.items():
        assert count == Counter(s=1, f=1), f"flow {key}: {dict(count)}"
        assert start_ts[key] <= finish_ts[key], key
    return len(ends)


def check_our_tracks(trace: Trace) -> None:
    """No two slices of one of overlapscope's tracks overlap in part."""
    for key, spans in _slices(trace).items():
        if not trace.threads.get(key, "").startswith(OURS):
            continue
        spans.sort()
        for (a0, b0), (a1, _) in itertools.pairwise(spans):
            assert a1 >= b0 - 1e-6, f"{trace.threads[key]}: {a0, b0} and {a1}"


def check_nesting(trace: Trace) -> None:
    """On every track the complete events nest or lie apart, their times rounded to whole
    nanoseconds as Perfetto's JSON reader rounds them, the longer first where two start
    together (its order)."""
    spans: defaultdict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in trace.events:
        if e["ph"] == "X":
            start = round(e["ts"] * 1000)
            spans[(e["pid"], e["tid"])].append((start, start + round(e["dur"] * 1000)))
    for key, track in spans.items():
        open_ends: list[int] = []
        for start, end in sorted(track, key=lambda s: (s[0], s[0] - s[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], f"{trace.threads.get(key)}: {start, end}"
            open_ends.append(end)


def read_trace(path: Path) -> Trace:
    """The file, checked as the module doc says."""
    doc = json.loads(_one_member(path.read_bytes()))
    assert isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list)
    trace = Trace({k: v for k, v in doc.items() if k != "traceEvents"}, doc["traceEvents"])
    for e in trace.events:
        check_event(e)
        if e["ph"] == "M" and e["name"] == "process_name":
            assert e["pid"] not in trace.processes, f"two names for pid {e['pid']}"
            trace.processes[e["pid"]] = e["args"]
    _names(trace)
    check_flows(trace)
    check_our_tracks(trace)
    check_nesting(trace)
    return trace
