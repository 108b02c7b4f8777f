"""Clock alignment across ranks, estimated from the collectives themselves.

Kineto stamps each rank's events with its own host clock; on several hosts the clocks differ by
microseconds to milliseconds, and an offset larger than the real lag makes a punctual rank
look like the straggler. A synchronising collective (all-gather, reduce-scatter, all-reduce,
all-to-all, barrier) ends on every rank at nearly the same moment: no rank can finish before
the last one has sent its data. So for every collective matched across ranks (same
``group, step, seq``), ``end_us(rank) - end_us(reference)`` measures the rank's clock offset
plus noise (a thread descheduled after the transfer, a launch delayed).

Per rank, over its matched collectives::

    d_k = end_k(rank) - end_k(reference)       at time x_k = end_k(rank), the rank's own clock
    offset(x) = offset_us + drift_ppm * 1e-6 * (x - center_us)

``offset_us`` is the median of ``d`` (robust to the heavy tail of late ends); where the trace
is long and the collectives many, ``drift_ppm`` is the Theil-Sen slope (median of pairwise
slopes), kept only when it is significant (three standard errors, and at least
:data:`MIN_DRIFT_EFFECT_US` over the span) plausible for a clock (at most
:data:`MAX_DRIFT_PPM`) and a clear fit (the line halves the spread), so noise does not tilt
the clock. ``spread_us`` is
the robust standard deviation (1.4826 * MAD) of the residuals, ``stderr_us`` the standard error
of the offset (1.2533 * spread / sqrt(n)). :func:`align` subtracts
``offset(ts)`` from ``ts_us`` and ``end_us`` of every event of the rank (durations unchanged).

A rank with fewer than :data:`MIN_COLLECTIVES` matched collectives keeps its clock, with one
warning line. The reference is the rank that matches the most collectives (ties: the lowest).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from overlapscope.analysis.segments import column_in, column_values
from overlapscope.arrays import FloatArray
from overlapscope.manifest import RunManifest
from overlapscope.phases import CollectiveKind, Lane
from overlapscope.trace.loader import RunTraces

KEY = ["group", "step", "seq"]
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
MIN_COLLECTIVES = 5
# Drift is fitted only over a span this long, with at least this many collectives.
MIN_DRIFT_SPAN_US = 100_000.0
# Quartz clocks drift by tens of ppm; a fitted slope beyond this is a change in the noise
# (a rank descheduled more in one phase of the run), not a clock: it is not applied.
MAX_DRIFT_PPM = 1000.0
MIN_DRIFT_COLLECTIVES = 10
MIN_DRIFT_EFFECT_US = 20.0
# Ranks on one host share a clock; below this, an estimated offset there is end-time noise.
SHARED_HOST_MIN_OFFSET_US = 5_000.0
DRIFT_SIGNIFICANCE = 3.0
# ... and only when the line at least halves the spread of the ends around it: a change of
# regime in the noise (one phase of the run descheduled more) tilts a line without fitting it.
MIN_SPREAD_GAIN = 2.0
# Theil-Sen over at most this many pairs (a fixed-seed sample beyond).
MAX_PAIRS = 200_000
OFFSET_COLUMNS = [
    "rank",
    "reference_rank",
    "offset_us",
    "drift_ppm",
    "center_us",
    "spread_us",
    "stderr_us",
    "num_collectives",
    "aligned",
]


def _sync_rows(events: pd.DataFrame) -> npt.NDArray[np.int64]:
    """Positions of the transfers of synchronising collectives that carry a group and a seq
    (compared on the categorical codes: no string comparison over the whole table)."""
    seq = events["seq"].to_numpy()
    rows = np.flatnonzero(column_in(events["lane"], [Lane.COMM.value]) & (seq >= 0))
    keep = column_in(events["kind"], SYNC_KINDS, rows)
    keep &= pd.notna(column_values(events["group"], rows))
    return rows[keep]


@dataclasses.dataclass(frozen=True, slots=True)
class _Matched:
    """End times per (collective, rank) as a matrix, with what names its rows: row ``i`` is
    the collective ``keys[i]`` (group code, step + 1, seq packed), column ``j`` rank
    ``ranks[j]``."""

    ends: FloatArray
    ranks: npt.NDArray[np.int64]
    keys: npt.NDArray[np.int64]
    groups: npt.NDArray[np.object_]
    step_span: int
    seq_span: int

    @staticmethod
    def of(events: pd.DataFrame) -> _Matched | None:
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
        # One transfer per rank and collective; should a rank hold several, its last end
        # counts.
        np.maximum.at(ends, (row, col), events["end_us"].to_numpy(np.float64)[rows])
        ends[np.isinf(ends)] = np.nan
        return _Matched(ends, ranks, keys, np.asarray(groups), step_span, seq_span)

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


def matched_ends(events: pd.DataFrame) -> pd.DataFrame:
    """End time of every synchronising collective per rank: one row per (group, step, seq),
    one column per rank (NaN where the rank lacks it)."""
    matched = _Matched.of(events)
    return pd.DataFrame() if matched is None else matched.frame()


def _theil_sen(x: FloatArray, y: FloatArray) -> float:
    n = len(x)
    i, j = np.triu_indices(n, k=1)
    if len(i) > MAX_PAIRS:
        pick = np.random.default_rng(0).choice(len(i), MAX_PAIRS, replace=False)
        i, j = i[pick], j[pick]
    dx = x[j] - x[i]
    ok = dx != 0
    if not ok.any():
        return 0.0
    return float(np.median((y[j] - y[i])[ok] / dx[ok]))


def _robust_sd(r: FloatArray) -> float:
    return float(1.4826 * np.median(np.abs(r - np.median(r)))) if len(r) else float("nan")


def fit_offset(x: FloatArray, d: FloatArray) -> tuple[float, float, float, float]:
    """``(offset_us, slope, center_us, spread_us)`` of ``d`` against ``x`` (see module doc)."""
    center = float(np.median(x))
    offset = float(np.median(d))
    spread = _robust_sd(d - offset)
    span = float(x.max() - x.min()) if len(x) else 0.0
    if len(x) < MIN_DRIFT_COLLECTIVES or span < MIN_DRIFT_SPAN_US:
        return offset, 0.0, center, spread
    slope = _theil_sen(x, d)
    line_offset = float(np.median(d - slope * (x - center)))
    resid = d - line_offset - slope * (x - center)
    sd = _robust_sd(resid)
    # Standard error of a median-based slope (1.25: the median's efficiency loss).
    se = 1.25 * sd / (float(np.std(x)) * np.sqrt(len(x))) if np.std(x) > 0 else np.inf
    plausible = abs(slope) * 1e6 <= MAX_DRIFT_PPM
    if (
        plausible
        and abs(slope) > DRIFT_SIGNIFICANCE * se
        and abs(slope) * span >= MIN_DRIFT_EFFECT_US
    ):
        return line_offset, slope, center, sd
    return offset, 0.0, center, spread


def estimate_offsets(events: pd.DataFrame) -> pd.DataFrame:
    """One row per rank of ``events`` (columns :data:`OFFSET_COLUMNS`). ``aligned`` is False
    for the reference and for ranks with too few matched collectives (offset NaN)."""
    ranks = sorted(int(r) for r in pd.unique(events["rank"].to_numpy()))
    matched = _Matched.of(events)
    if matched is None or matched.ends.shape[1] < 2:
        ref = ranks[0] if ranks else -1
        return _table([_row(r, ref, np.nan, 0.0, np.nan, np.nan, 0, False) for r in ranks])
    has = ~np.isnan(matched.ends)
    counts = has.sum(axis=0)
    # the rank that matches the most collectives (ties: the lowest; ranks are sorted)
    col_ref = int(np.argmax(counts))
    ref = int(matched.ranks[col_ref])
    col_of = {int(r): j for j, r in enumerate(matched.ranks)}
    records = []
    for r in ranks:
        if r == ref:
            records.append(_row(r, ref, 0.0, 0.0, np.nan, 0.0, int(counts[col_ref]), False))
            continue
        if r not in col_of:
            records.append(_row(r, ref, np.nan, 0.0, np.nan, np.nan, 0, False))
            continue
        both = has[:, col_of[r]] & has[:, col_ref]
        n = int(both.sum())
        if n < MIN_COLLECTIVES:
            records.append(_row(r, ref, np.nan, 0.0, np.nan, np.nan, n, False))
            continue
        x = matched.ends[both, col_of[r]]
        offset, slope, center, spread = fit_offset(x, x - matched.ends[both, col_ref])
        records.append(_row(r, ref, offset, slope * 1e6, center, spread, n, True))
    return _table(records)


def _row(
    rank: int,
    ref: int,
    offset: float,
    drift_ppm: float,
    center: float,
    spread: float,
    n: int,
    aligned: bool,
) -> tuple[object, ...]:
    # Standard error of a median: 1.2533 sd / sqrt(n).
    stderr = 1.2533 * spread / np.sqrt(n) if n > 0 else np.nan
    return (rank, ref, offset, drift_ppm, center, spread, stderr, n, aligned)


_DTYPES = (np.int64, np.int64, *[np.float64] * 5, np.int64, np.bool_)


def _table(records: list[tuple[object, ...]]) -> pd.DataFrame:
    columns = zip(*records, strict=True) if records else [()] * len(OFFSET_COLUMNS)
    return pd.DataFrame(
        {
            name: np.asarray(values, dtype=dtype)
            for name, values, dtype in zip(OFFSET_COLUMNS, columns, _DTYPES, strict=True)
        }
    )


def offset_at(offsets: pd.DataFrame, rank: npt.ArrayLike, ts_us: npt.ArrayLike) -> FloatArray:
    """The clock offset to subtract from each (rank, time); 0 where the rank is not aligned."""
    rank_a = np.asarray(rank, dtype=np.int64)
    ts = np.asarray(ts_us, dtype=np.float64)
    used = offsets["aligned"].to_numpy(bool)
    if not used.any():
        return np.zeros(len(ts))
    # the aligned ranks, sorted, and each (rank, time)'s position among them (-1: none)
    used_ranks = offsets["rank"].to_numpy(np.int64)[used]
    order = np.argsort(used_ranks, kind="stable")
    sorted_ranks = used_ranks[order]
    pos = np.minimum(np.searchsorted(sorted_ranks, rank_a), len(order) - 1)
    hit = sorted_ranks[pos] == rank_a
    safe = order[pos]
    a = offsets["offset_us"].to_numpy(np.float64)[used][safe]
    b = offsets["drift_ppm"].to_numpy(np.float64)[used][safe] * 1e-6
    c = offsets["center_us"].to_numpy(np.float64)[used][safe]
    return np.where(hit, a + b * (ts - c), 0.0)


def align(
    events: pd.DataFrame, min_offset_us: float = 0.0
) -> tuple[pd.DataFrame, pd.DataFrame, tuple[str, ...]]:
    """``(events on the reference rank's clock, offsets table, warnings)``. Pure: ``events``
    is not changed. A rank without enough matched collectives keeps its clock (one warning);
    so does one whose offset is under ``min_offset_us`` (no warning: that is noise)."""
    offsets = estimate_offsets(events)
    columns = ("rank", "reference_rank", "num_collectives", "aligned")
    rank, ref, num, aligned = (offsets[c].tolist() for c in columns)
    warnings = tuple(
        f"rank {r}: clock not aligned: {n} collectives matched with rank "
        f"{f}, {MIN_COLLECTIVES} needed; its timestamps are compared as recorded"
        for r, f, n, ok in zip(rank, ref, num, aligned, strict=True)
        if not ok and r != f and len(offsets) > 1
    )
    if min_offset_us > 0:
        offsets = offsets.assign(
            aligned=offsets["aligned"] & (offsets["offset_us"].abs() >= min_offset_us)
        )
    if not offsets["aligned"].any():
        return events, offsets, warnings
    shift = offset_at(offsets, events["rank"].to_numpy(), events["ts_us"].to_numpy())
    if not np.any(shift):
        return events, offsets, warnings
    # A shallow copy with two new columns: the other columns are shared, ``events`` unchanged.
    aligned_events = events.copy(deep=False)
    aligned_events["ts_us"] = events["ts_us"].to_numpy() - shift
    aligned_events["end_us"] = events["end_us"].to_numpy() - shift
    return aligned_events, offsets, warnings


@dataclass(frozen=True, slots=True)
class Clocks:
    """The clock estimate as an analysis keeps it: the offsets table, whether they were
    applied, and the one host every rank ran on (if so)."""

    offsets: pd.DataFrame
    applied: bool
    shared_host: str | None


def shared_host(manifest: RunManifest | None) -> str | None:
    """The host every rank ran on, where the run's manifest says they all ran on one (then
    they read one clock and there is nothing to align); None where unknown or several.

    ``hosts`` (one name per rank) is written by ``overlapscope run``; a manifest without it,
    from before, has the launching ``host`` only, and ``overlapscope run`` launched every rank
    there (multi-node runs were started by hand with ``--dry-run``'s command)."""
    if manifest is None or manifest.tool != "overlapscope":
        return None
    if manifest.hosts:
        return manifest.hosts[0] if len(set(manifest.hosts)) == 1 else None
    return manifest.host or None


def align_run(run: RunTraces, enabled: bool = True) -> tuple[RunTraces, pd.DataFrame]:
    """The run on aligned clocks (``enabled=False``: as recorded) and the offsets table
    (estimated either way; its warnings are added to the run's only when applied).

    On one host (:func:`shared_host`) the ranks read one clock: an estimate there measures the
    collectives' own end-time noise (measured up to 2.8 ms on this project's busy 2-core
    machine), so only offsets of :data:`SHARED_HOST_MIN_OFFSET_US` or more, which no shared
    clock shows, are applied (a trace whose timestamps were shifted after the run)."""
    floor = SHARED_HOST_MIN_OFFSET_US if shared_host(run.manifest) is not None else 0.0
    events, offsets, warnings = align(run.events, floor)
    if not enabled:
        return run, offsets.assign(aligned=False)
    return dataclasses.replace(run, events=events, warnings=run.warnings + warnings), offsets
