"""The collectives matched across ranks, as the clocks read them: each synchronising
collective's start and end per rank (a matrix), and each send matched with its receives.

One collective is the set of its transfers with the same ``(group, step, seq)`` on
different ranks (collectives.py). A synchronising collective (all-gather, reduce-scatter,
all-reduce, all-to-all, barrier) needs every rank's data on every rank; a send's receives
need its data only.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt
import pandas as pd

from overlapscope.analysis.segments import column_in, column_values
from overlapscope.arrays import FloatArray
from overlapscope.phases import CollectiveKind, Lane
from overlapscope.trace.recognize.p2p import P2P_CAT

KEY = ["group", "step", "seq"]
# A clock row's earliest time its data may move, where a task computed it (issued_starts).
FROM_US = "from_us"
# Collectives whose end is synchronous across ranks: each rank needs every other rank's data.
SYNC_KINDS = frozenset(
    k.value
    for k in (
        CollectiveKind.ALL_GATHER,
        CollectiveKind.REDUCE_SCATTER,
        CollectiveKind.ALL_REDUCE,
        CollectiveKind.ALL_TO_ALL,
        CollectiveKind.BARRIER,
    )
)


def _sync_rows(events: pd.DataFrame) -> npt.NDArray[np.int64]:
    """Positions of the transfers of synchronising collectives that carry a group and a seq
    (compared on the categorical codes: no string comparison over the whole table)."""
    seq = events["seq"].to_numpy()
    rows = np.flatnonzero(column_in(events["lane"], [Lane.COMM.value]) & (seq >= 0))
    keep = column_in(events["kind"], SYNC_KINDS, rows)
    keep &= pd.notna(column_values(events["group"], rows))
    return rows[keep]


@dataclasses.dataclass(frozen=True, slots=True)
class Matched:
    """End times per (collective, rank) as a matrix, with what names its rows: row ``i`` is
    the collective ``keys[i]`` (group code, step + 1, seq packed), column ``j`` rank
    ``ranks[j]``."""

    ends: FloatArray
    starts: FloatArray  # (the same shape: each rank's start of each collective)
    ranks: npt.NDArray[np.int64]
    keys: npt.NDArray[np.int64]
    groups: npt.NDArray[np.object_]
    step_span: int
    seq_span: int

    @staticmethod
    def of(events: pd.DataFrame, start_us: FloatArray | None = None) -> Matched | None:
        """``start_us``: each row's start to use (default: its ``ts_us``)."""
        rows = _sync_rows(events)
        if len(rows) == 0:
            return None
        group, groups = pd.factorize(column_values(events["group"], rows))
        step = events["step"].to_numpy(np.int64)[rows] + 1  # -1 (outside every step): 0
        seq = events["seq"].to_numpy(np.int64)[rows]
        step_span, seq_span = int(step.max()) + 1, int(seq.max()) + 1
        key = (group.astype(np.int64) * step_span + step) * seq_span + seq
        keys, row = np.unique(key, return_inverse=True)
        ranks, col = np.unique(events["rank"].to_numpy(np.int64)[rows], return_inverse=True)
        ends = np.full((len(keys), len(ranks)), -np.inf)
        starts = np.full((len(keys), len(ranks)), np.inf)
        # One transfer per rank and collective; should a rank hold several, its first start
        # and last end count.
        np.maximum.at(ends, (row, col), events["end_us"].to_numpy(np.float64)[rows])
        start = events["ts_us"].to_numpy(np.float64) if start_us is None else start_us
        np.minimum.at(starts, (row, col), start[rows])
        ends[np.isinf(ends)] = np.nan
        starts[np.isinf(starts)] = np.nan
        return Matched(ends, starts, ranks, keys, np.asarray(groups), step_span, seq_span)

    def frame(self) -> pd.DataFrame:
        rest = self.keys // self.seq_span
        index = pd.MultiIndex.from_arrays(
            [
                pd.Index(self.groups[rest // self.step_span], dtype=object),
                rest % self.step_span - 1,
                self.keys % self.seq_span,
            ],
            names=KEY,
        )
        columns = pd.Index(self.ranks.tolist(), name="rank")
        return pd.DataFrame(self.ends, index=index, columns=columns)


def issued_starts(events: pd.DataFrame) -> FloatArray | None:
    """Per row, the earliest its collective's data may have moved, where that is before the
    row's start: a folded point-to-point collective (trace/recognize/p2p.py, the engine on gloo)
    starts when the one before it on its thread ended, yet its sends were posted at its
    issue, and a peer may have received them before that start (the quick start's 2-rank
    run: one rank's all-gather ended 243 µs before the other's folded start). Its issue is
    the latest issue range of its phase and unit on its thread that began before it. None
    where the run has no folded row (every other transfer starts when its data can move)."""
    folded = column_in(events["cat"], [P2P_CAT])
    if not folded.any():
        return None
    keys = [k for k in ("rank", "tid", "phase", "unit") if k in events]  # (a rank's file: no rank)
    issue = np.flatnonzero(column_in(events["lane"], [Lane.ISSUE.value]))
    ranges = pd.DataFrame({k: column_values(events[k], issue) for k in keys})
    ranges["issue_us"] = events["ts_us"].to_numpy(np.float64)[issue]
    rows = np.flatnonzero(folded)
    mine = pd.DataFrame({k: column_values(events[k], rows) for k in keys})
    mine["ts_us"] = events["ts_us"].to_numpy(np.float64)[rows]
    mine["row"] = rows
    found = pd.merge_asof(
        mine.sort_values("ts_us"),
        ranges.dropna(subset=["phase", "unit"]).sort_values("issue_us"),
        left_on="ts_us",
        right_on="issue_us",
        by=keys,
        direction="backward",
    ).dropna(subset=["issue_us"])
    out = events["ts_us"].to_numpy(np.float64).copy()
    at = found["row"].to_numpy(np.int64)
    out[at] = np.minimum(out[at], found["issue_us"].to_numpy(np.float64))
    return out


def matched_ends(events: pd.DataFrame) -> pd.DataFrame:
    """End time of every synchronising collective per rank: one row per (group, step, seq),
    one column per rank (NaN where the rank lacks it)."""
    matched = Matched.of(events)
    return pd.DataFrame() if matched is None else matched.frame()


def send_receive(
    events: pd.DataFrame, ranks: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], FloatArray, FloatArray]:
    """Every send matched with its receives (same group, step and seq; one sender): per
    pair, the receiving and the sending rank (their columns in ``ranks``), the receive's
    end and the send's start."""
    kinds = [CollectiveKind.SEND.value, CollectiveKind.RECV.value]
    seq = events["seq"].to_numpy()
    rows = np.flatnonzero(column_in(events["kind"], kinds) & (seq >= 0))
    rows = rows[pd.notna(column_values(events["group"], rows))]
    rank = events["rank"].to_numpy(np.int64)[rows]
    col = np.minimum(np.searchsorted(ranks, rank), max(len(ranks) - 1, 0))
    known = (ranks[col] == rank) if len(ranks) else np.zeros(len(rows), dtype=bool)
    rows, col = rows[known], col[known]
    if not len(rows):
        none = np.zeros(0, dtype=np.int64)
        return none, none, np.zeros(0), np.zeros(0)
    frame = pd.DataFrame(
        {"g": column_values(events["group"], rows), "step": events["step"].to_numpy()[rows],
         "seq": seq[rows], "send": column_in(events["kind"], kinds[:1], rows), "col": col,
         "ts": events["ts_us"].to_numpy(np.float64)[rows],
         "end": events["end_us"].to_numpy(np.float64)[rows]}
    )  # fmt: skip
    sends = frame[frame["send"]].drop_duplicates(["g", "step", "seq"], keep=False)
    pairs = frame[~frame["send"]].merge(sends, on=["g", "step", "seq"], suffixes=("", "_s"))
    pairs = pairs[pairs["col"] != pairs["col_s"]]
    return (
        pairs["col"].to_numpy(np.int64),
        pairs["col_s"].to_numpy(np.int64),
        pairs["end"].to_numpy(np.float64),
        pairs["ts_s"].to_numpy(np.float64),
    )
