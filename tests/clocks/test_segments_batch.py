"""Segmenting many windows in one pass (segments.segment_groups) cuts each window exactly as
cutting it alone does (segments.segment_arrays): real runs, and hand-built windows with ties
(equal starts, equal ends, zero-length events, events past the window)."""

from __future__ import annotations

import numpy as np
import pytest

from overlapscope.analysis.critical_path.graph import Events
from overlapscope.analysis.critical_path.path import _windows
from overlapscope.analysis.segments import segment_arrays, segment_groups
from overlapscope.trace.run.loader import load_run
from tests.conftest import REPO


def one_by_one(group, lane, s, e, lo, hi):  # type: ignore[no-untyped-def]
    parts = []
    for g in range(len(lo)):
        mine = np.flatnonzero(group == g)
        start, end, kind, event = segment_arrays(lane[mine], s[mine], e[mine], (lo[g], hi[g]))
        ev = np.where(event >= 0, mine[np.maximum(event, 0)], -1)
        parts.append((start, end, kind, ev, np.full(len(start), g)))
    return [np.concatenate([p[i] for p in parts]) for i in range(5)]


def same(group, lane, s, e, lo, hi) -> None:  # type: ignore[no-untyped-def]
    together = segment_groups(group, lane, s, e, (lo, hi))
    alone = one_by_one(group, lane, s, e, lo, hi)
    for got, want in zip(together, alone, strict=True):
        assert got.tolist() == want.tolist()


@pytest.mark.parametrize("name", ["backward_pre", "none"])
def test_one_pass_equals_window_by_window_on_sample_runs(name: str) -> None:
    events = load_run(REPO / "traces" / name).events
    events = events[events["step"] >= 0].reset_index(drop=True)
    rows = Events.of(events, np.arange(len(events)))
    rank, start, end, step = _windows(rows)
    key = step * 100 + rank
    at = np.minimum(np.searchsorted(key, rows.step * 100 + rows.rank), len(key) - 1)
    group = np.where(key[at] == rows.step * 100 + rows.rank, at, -1)
    assert len(start) == 4 and (group >= 0).sum() > 100
    same(group, rows.lane, rows.ts, rows.end, start, end)


def test_one_pass_equals_window_by_window_with_ties() -> None:
    rng = np.random.default_rng(3)
    num = 400
    group = rng.integers(-1, 5, num)
    lane = rng.integers(0, 4, num)
    s = rng.integers(0, 60, num).astype(np.float64)  # small integers: many equal times
    e = s + rng.integers(0, 15, num)
    lo = np.asarray([0.0, 5.0, 10.0, 20.0, 30.0])
    hi = np.asarray([50.0, 40.0, 10.0, 70.0, 31.0])  # one empty window
    same(group, lane, s, e, lo, hi)
