"""What a rank's trace says about the job it was recorded in, for telling whether traces
can be one run (:mod:`overlapscope.trace.run.same_run`): a few numbers per file, made once
when it is read.

- the profiled steps (``ProfilerStep#N``): each one's start and end on the wall clock
  (``baseTimeNanoseconds`` + ts; None without a base time);
- the trace's own span on the wall clock;
- per (step, process group), how many collectives the rank's host issued in that step and
  their lowest and highest sequence number (torch's ``Seq`` argument, where the trace has
  it): every rank of one job issues the same collectives of a group in the same order, so
  the same count and the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from overlapscope.phases import CollectiveKind
from overlapscope.trace.naming.generic import STEP_RE, collective_kind

UNNAMED_GROUP = "(no group name)"  # collectives whose args name no process group


@dataclass(frozen=True, slots=True)
class Fingerprint:
    # step number -> (start, end) in ns on the wall clock; start/end None-free only with
    # a base time (``timed``)
    steps: dict[int, tuple[int, int]] = field(default_factory=dict)
    span_ns: tuple[int, int] = (0, 0)  # first event's start, last event's end
    timed: bool = False  # the times are on the wall clock (the trace has a base time)
    # (step, process group) -> (count, lowest Seq, highest Seq) of the collectives the
    # host issued in it (Seq -1: the trace records none)
    collectives: dict[tuple[int, str], tuple[int, int, int]] = field(default_factory=dict)


def _steps(events: pd.DataFrame, origin_ns: int) -> dict[int, tuple[int, int]]:
    names = events["name"].cat.categories
    numbers = {i: int(m.group(1)) for i, c in enumerate(names) if (m := STEP_RE.match(str(c)))}
    if not numbers:
        return {}
    codes = events["name"].cat.codes.to_numpy()
    rows = np.flatnonzero(np.isin(codes, list(numbers)))
    ts, dur = events["ts_us"].to_numpy()[rows], events["dur_us"].to_numpy()[rows]
    out: dict[int, tuple[int, int]] = {}
    for code, t, d in zip(codes[rows].tolist(), ts.tolist(), dur.tolist(), strict=True):
        start = origin_ns + round(t * 1000.0)
        out.setdefault(numbers[code], (start, start + round(d * 1000.0)))
    return out


def _not_p2p(kinds: np.ndarray) -> np.ndarray:
    """Per row: its collective (a ``Collective name`` or an event name) is not a send/recv;
    classified once per distinct text."""
    codes, uniq = pd.factorize(kinds)
    p2p = [collective_kind(str(u)) is CollectiveKind.SEND_RECV for u in uniq]
    return ~np.asarray([*p2p, False], dtype=bool)[codes]


def _collectives(
    events: pd.DataFrame, comm: pd.DataFrame, steps: dict[int, tuple[int, int]], origin_ns: int
) -> dict[tuple[int, str], tuple[int, int, int]]:
    """Per (step, group): how many collectives the host issued in it and their lowest and
    highest Seq (-1 where the trace has none). Send/recv are left out: their numbers count
    per pair of ranks. An op without a group argument is of :data:`UNNAMED_GROUP`."""
    if comm.empty or not steps:
        return {}
    idx = comm.index.to_numpy()
    order = sorted(steps.items(), key=lambda kv: kv[1][0])
    starts = np.asarray([s for _, (s, _) in order], dtype=np.int64)
    ends = np.asarray([e for _, (_, e) in order], dtype=np.int64)
    ts_ns = origin_ns + np.round(events["ts_us"].to_numpy()[idx] * 1000.0).astype(np.int64)
    at = np.searchsorted(starts, ts_ns, side="right") - 1
    inside = (at >= 0) & (ts_ns < ends[np.maximum(at, 0)]) & ~events["on_gpu"].to_numpy()[idx]
    names = comm["coll_name"].to_numpy(dtype=object)
    name = events["name"].cat  # (the names of the comm rows only, not of every event)
    own = np.asarray(name.categories, dtype=object)[name.codes.to_numpy()[idx]]
    kinds = np.where(pd.isna(names), own, names)
    issuing = np.asarray([isinstance(n, str) and n.startswith("c10d::") for n in own], dtype=bool)
    rows = np.flatnonzero(inside & ~issuing.reshape(len(own)))
    rows = rows[_not_p2p(kinds[rows])]
    if not len(rows):
        return {}
    gcode, groups = pd.factorize(comm["pg_name"].to_numpy(dtype=object)[rows])
    names_of = [str(g) if isinstance(g, str) else UNNAMED_GROUP for g in groups]
    names_of.append(UNNAMED_GROUP)  # (code -1: no group argument)
    key = at[rows] * len(names_of) + np.where(gcode < 0, len(names_of) - 1, gcode)
    seq = np.nan_to_num(comm["seq_arg"].to_numpy(dtype=np.float64)[rows], nan=-1.0)
    uniq, inverse, count = np.unique(key, return_inverse=True, return_counts=True)
    low = np.full(len(uniq), np.inf)
    high = np.full(len(uniq), -1.0)
    numbered = seq >= 0
    np.minimum.at(low, inverse[numbered], seq[numbered])
    np.maximum.at(high, inverse[numbered], seq[numbered])
    return {
        (order[k // len(names_of)][0], names_of[k % len(names_of)]):
            (int(n), -1 if lo == np.inf else int(lo), int(hi))
        for k, n, lo, hi in zip(uniq.tolist(), count.tolist(), low.tolist(), high.tolist(),
                                strict=True)
    }  # fmt: skip


def fingerprint(
    events: pd.DataFrame, comm: pd.DataFrame, origin_ns: int, timed: bool
) -> Fingerprint:
    """The fingerprint of one file's columns (``events`` as :class:`RawTrace` holds them,
    ts_us from ``origin_ns``; ``comm``: its collective arguments)."""
    steps = _steps(events, origin_ns)
    ts, end = events["ts_us"].to_numpy(), (events["ts_us"] + events["dur_us"]).to_numpy()
    span = (
        origin_ns + round(float(ts.min()) * 1000.0),
        origin_ns + round(float(end.max()) * 1000.0),
    )
    return Fingerprint(steps, span, timed, _collectives(events, comm, steps, origin_ns))
