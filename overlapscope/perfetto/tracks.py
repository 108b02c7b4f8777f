"""The analysis drawn as tracks of a rank: what each slice is, from the analysis' tables.

Nothing is computed here that the analysis does not already say; the tables are cut into
slices where they lie in time:

* **exposed communication**: each transfer of the rank (its ``comm`` rows, with phase and
  unit) where it lies in the rank's exposed intervals (``RunAnalysis.exposed``): the pieces
  of one transfer add up to its exposed time, and the pieces of all transfers to the exposed
  intervals. One track per phase.
* **waiting for a peer**: a collective's ``peer_wait_us`` (``collective_ranks``: its duration
  on this rank less the fastest rank's) from the rank's start of the transfer, naming the
  rank that arrived last.
* **GPU idle by cause**: the idle gaps the analysis traced to a cause, where it has them.
* **critical path**: the path's links on this rank, and its hops to and from other ranks as
  flow arrows.

A track's slices never overlap in part (the viewers drop or mis-nest such slices): slices
that would are spread over extra rows of the track (:func:`rows`). Times are written in whole
nanoseconds, so that slices that touch still touch once a viewer has rounded them.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd

from overlapscope.perfetto import events as ev
from overlapscope.trace.groups.assign import parse_label

Sink = Callable[[dict[str, Any]], None]
LABELS = ("phase", "unit", "kind", "group", "step", "seq", "bytes")


def ns(us: float) -> int:
    return round(us * 1000.0)


def clean(record: dict[str, Any]) -> dict[str, Any]:
    """JSON-ready args: numpy scalars as Python ones, missing values left out."""
    out: dict[str, Any] = {}
    for k, v in record.items():
        if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
            continue
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, float) and math.isnan(v):
            continue
        out[k] = v
    return out


def rows(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A row per interval such that no two intervals of a row overlap (touching is fine):
    each interval, by start, takes the lowest row free by then."""
    order = np.lexsort((ends, starts))
    row = np.zeros(len(starts), dtype=np.int64)
    busy: list[tuple[int, int]] = []  # (end, row) of the rows in use
    free: list[int] = []  # rows free again
    num = 0
    for i in order.tolist():
        while busy and busy[0][0] <= starts[i]:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            r = heapq.heappop(free)
        else:
            r, num = num, num + 1
        row[i] = r
        heapq.heappush(busy, (int(ends[i]), r))
    return row


def exposed_pieces(comm: pd.DataFrame, exposed: pd.DataFrame) -> pd.DataFrame:
    """Each transfer's parts inside the exposed intervals: ``start_us, end_us`` and the
    transfer's labels (:data:`LABELS`). ``exposed``: one rank's intervals (disjoint)."""
    starts = np.sort(exposed["start_us"].to_numpy(np.float64))
    ends = np.sort(exposed["end_us"].to_numpy(np.float64))
    a = comm["ts_us"].to_numpy(np.float64)
    b = comm["end_us"].to_numpy(np.float64)
    lo = np.searchsorted(ends, a, side="right")
    hi = np.searchsorted(starts, b, side="left")
    count = np.maximum(hi - lo, 0)
    row = np.repeat(np.arange(len(comm)), count)
    # each transfer's run of intervals: lo, lo + 1, ... for as many as it meets
    first = np.repeat(lo, count)
    at = first + np.arange(len(row)) - np.repeat(np.cumsum(count) - count, count)
    start = np.maximum(a[row], starts[at]) if len(row) else np.empty(0)
    end = np.minimum(b[row], ends[at]) if len(row) else np.empty(0)
    keep = end > start
    labels = {c: comm[c].to_numpy()[row][keep] for c in LABELS if c in comm.columns}
    return pd.DataFrame({"start_us": start[keep], "end_us": end[keep], **labels})


def peer_waits(comm: pd.DataFrame, waits: pd.DataFrame) -> pd.DataFrame:
    """The time each collective waited for its last peer, from the rank's start of it:
    ``start_us, end_us`` and the collective's figures. ``waits``: the rank's rows of
    ``collective_ranks`` with the collective's ``straggler_rank``, ``straggler_lag_us``,
    ``transfer_us``."""
    key = ["group", "step", "seq"]
    starts = comm[comm["seq"] >= 0].groupby(key, observed=True, dropna=False)["ts_us"].min()
    w = waits[waits["peer_wait_us"] > 0]
    w = w.join(starts, on=key, how="inner")
    return w.assign(start_us=w["ts_us"], end_us=w["ts_us"] + w["peer_wait_us"]).drop(
        columns="ts_us"
    )


class Tracks:
    """Names and fills the rank's added tracks, in order, each slice on a row of its track."""

    def __init__(self, rank: int, sink: Sink) -> None:
        self.rank = rank
        self.pid = ev.rank_pid(rank)
        self.sink = sink
        self.count = 0

    def new(self, name: str) -> int:
        """A new track named ``name``: its tid."""
        tid = ev.track_tid(self.rank, ev.ADDED + self.count)
        for m in ev.thread_names(self.pid, tid, ev.PREFIX + name, -1000 + self.count):
            self.sink(m)
        self.count += 1
        return tid

    def slices(
        self, name: str, table: pd.DataFrame, label: Callable[[dict[str, Any]], str], colour: str
    ) -> np.ndarray:
        """One slice per row of ``table`` (``start_us, end_us`` and its args) on the track
        ``name`` (and its extra rows): the tid of each row's slice."""
        a = np.asarray([ns(x) for x in table["start_us"].tolist()], dtype=np.int64)
        b = np.asarray([ns(x) for x in table["end_us"].tolist()], dtype=np.int64)
        row = rows(a, b)
        num_rows = int(row.max()) + 1 if len(row) else 0
        tids = [self.new(name if r == 0 else f"{name} ({r + 1})") for r in range(num_rows)]
        out = np.asarray([tids[r] for r in row.tolist()], dtype=np.int64)
        records = table.drop(columns=["start_us", "end_us"]).to_dict("records")
        for i, record in enumerate(records):
            args = clean(record)
            start, dur = int(a[i]), int(b[i] - a[i])
            tid = int(out[i])
            self.sink(
                ev.complete(label(args), self.pid, tid, start / 1000, dur / 1000, args, colour)
            )
        return out


def by_phase(pieces: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    """The pieces per phase, phases in order of name (a piece without a phase: ``comm``);
    in a job of several process groups (trace/groups/assign.py names a group of part of the job),
    per phase and group: ``ar_rep · mesh_replicate[0,2]``, one track each."""
    if not len(pieces):
        return
    phase = pieces["phase"].astype(object)
    phase = phase.where(phase.notna(), "comm")
    if "group" in pieces.columns:
        group = pieces["group"].astype(object)
        if any(parse_label(g) for g in set(group.tolist())):
            phase = phase.astype(str) + " · " + group.astype(str)
    for name in sorted(set(phase.tolist())):
        yield str(name), pieces[(phase == name).to_numpy()]
