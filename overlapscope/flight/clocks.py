"""Each rank's clock offset from the dumps, by the analysis' own rules
(``overlapscope/analysis/clocks/alignment.py`` and ``analysis/clocks/bounds.py``).

Where the dumps record completions (NCCL), the rule is the analysis' one for traces: a
synchronising collective completes on every rank at nearly the same moment, so the median
(with the drift fit) of ``completed(rank) - completed(reference)`` over the matched
collectives is the offset, and causality (no rank completes before the last one started)
bounds it. Where they record the issue only (gloo), the same fit runs on the issue times:
ranks issue most collectives of a step within a short spread of each other, so the median
difference is the offset, and a rank that is late on a minority of collectives (one unit,
one phase) stays late. A rank late on most of them cannot be told from an offset there.

Ranks that ran on one host (the run's ``run.json``) read one clock: nothing is applied,
and the report says so; ``--no-align`` keeps the clocks as recorded too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.analysis.clocks.alignment import MIN_COLLECTIVES, fit_offset
from overlapscope.analysis.clocks.bounds import causal_bounds
from overlapscope.flight.match import KEY, base_ns, raw_us

# collectives that end together on every rank (a broadcast's root need not wait)
_SYNCHRONISING = frozenset({"all_gather", "all_reduce", "reduce_scatter", "barrier", "all_to_all",
                            "_allgather_base", "_reduce_scatter_base", "allgather", "alltoall"})  # fmt: skip
# The fit runs on at most this many matched collectives, evenly spaced over the dumps (a
# ring buffer of 20,000: Theil-Sen's pairs grow with the square).
MAX_FIT_POINTS = 2_000
OFFSET_COLUMNS = ["rank", "reference_rank", "offset_us", "drift_ppm", "center_us",
                  "num_collectives", "lo_us", "hi_us", "applied"]  # fmt: skip


@dataclass(frozen=True, slots=True)
class FlightClocks:
    offsets: pd.DataFrame  # OFFSET_COLUMNS
    basis: str  # "completions" | "issues" | "none"
    note: str  # the one sentence the report prints


def _matrix(entries: pd.DataFrame, values: np.ndarray) -> pd.DataFrame:
    """(collective x rank) of ``values`` over the synchronising collectives."""
    sync = entries["op"].astype(str).isin(_SYNCHRONISING).to_numpy() & ~entries["is_p2p"].to_numpy()
    df = entries.loc[sync, [*KEY, "rank"]].assign(v=values[sync])
    return df.pivot_table(index=KEY, columns="rank", values="v", aggfunc="first")


def estimate(entries: pd.DataFrame, apply: bool, why_not: str | None) -> FlightClocks:
    """The offsets of the keyed entries' ranks (matched collectives only)."""
    base = base_ns(entries)
    ends = raw_us(entries, "end", base)
    has_ends = int(np.isfinite(ends).sum()) >= MIN_COLLECTIVES * max(entries["rank"].nunique(), 1)
    basis = "completions" if has_ends else "issues"
    m = _matrix(entries, ends if has_ends else raw_us(entries, "issue", base))
    ranks = sorted(int(r) for r in entries["rank"].unique())
    if m.shape[1] < 2:
        return FlightClocks(_table([_row(r, ranks[0] if ranks else -1) for r in ranks]), "none",
                            "clocks: one rank or no matched collectives; nothing to align")  # fmt: skip
    counts = m.notna().sum(axis=0)
    ref = int(counts.idxmax())
    lo, hi = _bounds(entries, m, base, has_ends, ref)
    rows = []
    for r in ranks:
        both = m[r].notna() & m[ref].notna() if r in m else pd.Series(False, index=m.index)
        n = int(both.sum())
        if r == ref or n < MIN_COLLECTIVES:
            rows.append(_row(r, ref, n=n, bounds=(lo.get(r, -np.inf), hi.get(r, np.inf))))
            continue
        x = m.loc[both, r].to_numpy(np.float64)
        d = x - m.loc[both, ref].to_numpy(np.float64)
        pick = np.linspace(0, n - 1, min(n, MAX_FIT_POINTS)).astype(np.int64)
        offset, slope, center, _spread = fit_offset(x[pick], d[pick])
        a, b = lo.get(r, -np.inf), hi.get(r, np.inf)
        if a <= b:
            offset = float(np.clip(offset, a, b))
        rows.append((r, ref, offset, slope * 1e6, center, n, a, b, apply))
    return FlightClocks(_table(rows), basis, _note(basis, apply, why_not, ref, m.shape[0]))


def _bounds(entries: pd.DataFrame, m: pd.DataFrame, base: int, has_ends: bool, ref: int
            ) -> tuple[dict[int, float], dict[int, float]]:  # fmt: skip
    """Causal bounds of each rank's offset where starts and completions are recorded."""
    if not has_ends:
        return {}, {}
    starts = _matrix(entries, raw_us(entries, "start", base)).reindex_like(m)
    cols = list(m.columns)
    lo, hi = causal_bounds(starts.to_numpy(np.float64), m.to_numpy(np.float64), cols.index(ref))
    return dict(zip(cols, lo.tolist(), strict=True)), dict(zip(cols, hi.tolist(), strict=True))


def _row(r: int, ref: int, n: int = 0, bounds: tuple[float, float] = (-np.inf, np.inf)
         ) -> tuple[object, ...]:  # fmt: skip
    offset = 0.0 if r == ref else np.nan
    return (r, ref, offset, 0.0, np.nan, n, *bounds, False)


def _table(rows: list[tuple[object, ...]]) -> pd.DataFrame:
    df = pd.DataFrame.from_records(rows, columns=OFFSET_COLUMNS)
    return df.astype({"rank": np.int64, "reference_rank": np.int64, "applied": bool})


def _note(basis: str, apply: bool, why_not: str | None, ref: int, n: int) -> str:
    rule = (
        f"the completions of {n} matched collectives (median difference to rank {ref}, with "
        "drift, inside the causal bounds of starts and completions)"
        if basis == "completions"
        else f"the issue times of {n} matched collectives (median difference to rank {ref}; "
        "gloo records no start or completion, so a rank late on most collectives reads as "
        "an offset)"
    )
    if apply:
        return f"clocks: aligned on {rule}"
    return f"clocks: estimated on {rule}, not applied: {why_not}"


def row_offsets(entries: pd.DataFrame, clocks: FlightClocks) -> np.ndarray:
    """Each entry's offset in µs (0 where its rank's clock is kept)."""
    o = clocks.offsets.set_index("rank")
    used = o["applied"] & o["offset_us"].notna()
    rank = entries["rank"].to_numpy()
    off = pd.Series(np.where(used, o["offset_us"], 0.0), index=o.index)
    slope = pd.Series(np.where(used, o["drift_ppm"] * 1e-6, 0.0), index=o.index)
    center = o["center_us"].fillna(0.0)
    x = raw_us(entries, "issue", base_ns(entries))
    return pd.Series(rank).map(off).to_numpy(np.float64) + pd.Series(rank).map(slope).to_numpy(
        np.float64
    ) * (x - pd.Series(rank).map(center).to_numpy(np.float64))
