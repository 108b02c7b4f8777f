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

from overlapscope.analysis.clocks.bounds import causal_bounds, plausible, uncertainty
from overlapscope.analysis.collectives.matched import FROM_US, Matched, issued_starts, send_receive
from overlapscope.arrays import FloatArray
from overlapscope.manifest import RunManifest
from overlapscope.trace.run.loader import RunTraces

MIN_COLLECTIVES = 5
# Drift is fitted only over a span this long, with at least this many collectives.
MIN_DRIFT_SPAN_US = 100_000.0
# Quartz clocks drift by tens of ppm; a fitted slope beyond this is a change in the noise
# (a rank descheduled more in one phase of the run), not a clock: it is not applied.
MAX_DRIFT_PPM = 1000.0
MIN_DRIFT_COLLECTIVES = 10
MIN_DRIFT_EFFECT_US = 20.0
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
    "lo_us",
    "hi_us",
    "plausible_lo_us",
    "plausible_hi_us",
]
# ... and, once applied or not (align_run), how far the truth may be from what was applied.
UNCERTAINTY = "uncertainty_us"


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


@dataclasses.dataclass(frozen=True, slots=True)
class _Fit:
    """One rank's fit against the reference: offset at ``center``, slope (0: no drift),
    spread of the ends, and the drift-corrected end differences."""

    offset: float
    slope: float
    center: float
    spread: float
    diffs: FloatArray


def _fits(matched: Matched, ref: int) -> dict[int, _Fit]:
    """Per column with enough collectives matched with the reference column: its fit; then
    each column that shares too few with the reference (a rank in no group with it: HSDP's
    rank 3 and rank 0) against a column already fitted, that column's offset added (the
    ranks that share no group are placed through the others, in as few hops as there are)."""
    has = ~np.isnan(matched.ends)
    out: dict[int, _Fit] = {}
    placed = {ref: np.zeros(matched.ends.shape[0])}  # column -> its ends minus the ref's clock
    while True:
        found = {}
        for j in range(matched.ends.shape[1]):
            if j in placed or j in found:
                continue
            for k, shift in placed.items():
                both = has[:, j] & has[:, k]
                if int(both.sum()) < MIN_COLLECTIVES:
                    continue
                x = matched.ends[both, j]
                d = x - (matched.ends[both, k] - shift[both])
                offset, slope, center, spread = fit_offset(x, d)
                found[j] = _Fit(offset, slope, center, spread, d - slope * (x - center))
                break
        if not found:
            return out
        for j, f in found.items():
            out[j] = f
            placed[j] = f.offset + f.slope * (matched.ends[:, j] - f.center)


def _corrected(t: FloatArray, col: npt.NDArray[np.int64], fits: dict[int, _Fit]) -> FloatArray:
    """Times of columns ``col`` with each column's fitted drift taken out (offsets kept)."""
    out = t.copy()
    for j, f in fits.items():
        if f.slope:
            mine = col == j
            out[mine] = t[mine] - f.slope * (t[mine] - f.center)
    return out


def _bounds(
    events: pd.DataFrame, matched: Matched, ref: int, fits: dict[int, _Fit]
) -> tuple[FloatArray, FloatArray]:
    """Causal bounds of each column's offset at its center (bounds.py), from the
    matched collectives and the send/receive pairs on the drift-corrected clocks."""
    cols = np.broadcast_to(np.arange(matched.ends.shape[1]), matched.ends.shape)
    # the earliest each transfer's data may move (a folded point-to-point collective's
    # issue): the clock rows of a pipeline task carry it (FROM_US), a whole run's events
    # give it
    issued = events[FROM_US].to_numpy(np.float64) if FROM_US in events else issued_starts(events)
    early = matched if issued is None else Matched.of(events, issued)
    assert early is not None and early.starts.shape == matched.starts.shape
    starts = _corrected(early.starts.ravel(), cols.ravel(), fits).reshape(cols.shape)
    ends = _corrected(matched.ends.ravel(), cols.ravel(), fits).reshape(cols.shape)
    recv, send, recv_end, send_start = send_receive(events, matched.ranks)
    c = _corrected(recv_end, recv, fits) - _corrected(send_start, send, fits)
    return causal_bounds(starts, ends, ref, (recv, send, c))


def estimate_offsets(events: pd.DataFrame) -> pd.DataFrame:
    """One row per rank of ``events`` (columns :data:`OFFSET_COLUMNS`). ``aligned`` is False
    for the reference and for ranks with too few matched collectives (offset NaN). The
    offset lies in its causal bounds ``lo_us, hi_us`` (bounds.py); ``plausible_*``:
    those bounds cut to the range of its end differences."""
    ranks = sorted(int(r) for r in pd.unique(events["rank"].to_numpy()))
    matched = Matched.of(events)
    if matched is None or matched.ends.shape[1] < 2:
        ref = ranks[0] if ranks else -1
        return _table([_row(r, ref, None, 0, False, (np.nan,) * 4) for r in ranks])
    counts = (~np.isnan(matched.ends)).sum(axis=0)
    # the rank that matches the most collectives (ties: the lowest; ranks are sorted)
    col_ref = int(np.argmax(counts))
    ref = int(matched.ranks[col_ref])
    col_of = {int(r): j for j, r in enumerate(matched.ranks)}
    fits = _fits(matched, col_ref)
    lo, hi = _bounds(events, matched, col_ref, fits)
    records = []
    for r in ranks:
        j = col_of.get(r, -1)
        if r == ref:
            records.append(_row(r, ref, None, int(counts[col_ref]), False, (0.0,) * 4))
            continue
        n = 0
        if j >= 0:
            n = int((~np.isnan(matched.ends[:, j]) & ~np.isnan(matched.ends[:, col_ref])).sum())
        bounds = (float(lo[j]), float(hi[j])) if j >= 0 else (-np.inf, np.inf)
        fit = fits.get(j)
        if fit is None:
            records.append(_row(r, ref, None, n, False, (*bounds, *bounds)))
            continue
        n = max(n, len(fit.diffs))  # (placed through another rank: the ends it was fitted on)
        point = fit.offset if bounds[0] > bounds[1] else float(np.clip(fit.offset, *bounds))
        soft = plausible(*bounds, point, fit.diffs)
        records.append(
            _row(r, ref, dataclasses.replace(fit, offset=point), n, True, (*bounds, *soft))
        )
    return _table(records)


def _row(
    rank: int,
    ref: int,
    fit: _Fit | None,
    n: int,
    aligned: bool,
    bounds: tuple[float, float, float, float],
) -> tuple[object, ...]:
    offset, slope, center = (fit.offset, fit.slope, fit.center) if fit else (np.nan, 0.0, np.nan)
    spread = fit.spread if fit else (0.0 if rank == ref else np.nan)
    if rank == ref:
        offset = 0.0
    # Standard error of a median: 1.2533 sd / sqrt(n).
    stderr = 1.2533 * spread / np.sqrt(n) if n > 0 else np.nan
    return (rank, ref, offset, slope * 1e6, center, spread, stderr, n, aligned, *bounds)


_DTYPES = (np.int64, np.int64, *[np.float64] * 5, np.int64, np.bool_, *[np.float64] * 4)


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


def align(events: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, tuple[str, ...]]:
    """``(events on the reference rank's clock, offsets table, warnings)``. Pure: ``events``
    is not changed. A rank without enough matched collectives keeps its clock (one warning).
    One rule everywhere: every estimated offset is applied, whatever its size (a threshold
    that switched the correction on would make findings jump across it); how far the truth
    may be from it is the table's ``uncertainty_us``."""
    offsets = with_uncertainty(estimate_offsets(events), applied=True)
    warnings = _warnings(offsets)
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


def _warnings(offsets: pd.DataFrame) -> tuple[str, ...]:
    """A line per rank whose clock stays as recorded, and per rank whose collectives
    contradict causality (its bounds cross: a clock that drifts in a way not fitted, or
    timestamps moved by parts)."""
    out = []
    for r in offsets.itertuples(index=False):
        if r.rank == r.reference_rank or len(offsets) < 2:
            continue
        if not r.aligned:
            out.append(
                f"rank {r.rank}: clock not aligned: {r.num_collectives} collectives matched with "
                f"rank {r.reference_rank}, {MIN_COLLECTIVES} needed; its timestamps are compared "
                "as recorded"
            )
        if r.lo_us > r.hi_us:
            out.append(
                f"rank {r.rank}: its collectives contradict causality against rank "
                f"{r.reference_rank} (offset bounds {r.lo_us:+,.0f} > {r.hi_us:+,.0f} µs): its "
                "clock drifts in a way the fit does not follow, or its timestamps were edited"
            )
    return tuple(out)


def with_uncertainty(offsets: pd.DataFrame, applied: bool) -> pd.DataFrame:
    """The offsets table with ``uncertainty_us``: how far each rank's true offset may be
    from the one applied (the estimate; 0 where the clock is kept as recorded: not
    ``applied``, or not estimated), to the farther end of its plausible interval."""
    used = offsets["aligned"].to_numpy(bool) & applied
    shift = np.where(used, offsets["offset_us"].to_numpy(np.float64), 0.0)
    lo = offsets["plausible_lo_us"].to_numpy(np.float64)
    hi = offsets["plausible_hi_us"].to_numpy(np.float64)
    u = [
        uncertainty(a, b, c)
        for a, b, c in zip(lo.tolist(), hi.tolist(), shift.tolist(), strict=True)
    ]
    return offsets.assign(aligned=used, uncertainty_us=np.asarray(u, dtype=np.float64))


def clock_error(offsets: pd.DataFrame | None) -> pd.Series:
    """Per rank, how far its clock may be from the one applied (``uncertainty_us``)."""
    if offsets is None or offsets.empty:
        return pd.Series(dtype=np.float64)
    return offsets.set_index("rank")["uncertainty_us"]


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
    (estimated either way; its warnings are added to the run's only when applied). Ranks on
    one host (:func:`shared_host`) read one clock: their causal bounds contain 0; the
    estimate is applied there too (one rule for every run: a trace whose timestamps were
    moved after the run is put back, and end-time noise is no bigger than the uncertainty
    every comparison of ranks allows for)."""
    events, offsets, warnings = align(run.events)
    if not enabled:
        return run, with_uncertainty(offsets, applied=False)
    return dataclasses.replace(run, events=events, warnings=run.warnings + warnings), offsets


def estimate_clocks(run: RunTraces, enabled: bool = True) -> tuple[RunTraces, Clocks]:
    """The one clock estimate of every executor: :func:`align_run` (``run.events`` may hold
    only the collectives' rows: the pipeline's plan passes those) and the :class:`Clocks`
    the analysis reports (the offsets, whether applied, the shared host)."""
    aligned, offsets = align_run(run, enabled)
    return aligned, Clocks(offsets, enabled, shared_host(run.manifest))
