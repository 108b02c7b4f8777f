"""Compute contention: how much slower compute runs while the communication queue is busy.

``dur = base × (1 + α × busy_fraction)``, where ``busy_fraction`` is the part of a compute
range that overlaps the rank's communication. Within one run α can only be told where the
units' busy fractions differ (:func:`fit_contention`); across runs of one workload under
different policies they do (``none`` computes with an idle queue, ``backward_pre`` with a
busy one), so :func:`fit_contention_across` pools runs, each scaled by its own speed (its
forward compute, which no policy without forward prefetch overlaps) so that a slow run of the
machine is not read as contention.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from overlapscope.analysis.intervals import covered, union
from overlapscope.phases import Phase
from overlapscope.trace.naming.ranges import ROOT_UNIT

_FWD_BWD = [Phase.FWD.value, Phase.BWD.value]

MAX_CONTENTION = 1.5
# Fit contention only where the units' busy fractions differ by this much (standard
# deviation): where the queue is busy through every unit (backward_pre on a slow link) or
# through none, the slope is rounding noise (it came out at the 1.5 cap on one such run and
# halved its compute: a 27 % wrong prediction).
MIN_BUSY_SPREAD = 0.05


def busy_fraction(comp: pd.DataFrame, comm: pd.DataFrame) -> np.ndarray:
    """Per compute row (``rank, start_us, end_us, dur_us``), the fraction of it that overlaps
    its rank's communication rows."""
    over = np.zeros(len(comp))
    for r in comp["rank"].unique():
        sel = (comp["rank"] == r).to_numpy()
        mine = comm[comm["rank"] == r]
        busy = union(mine["start_us"].to_numpy(), mine["end_us"].to_numpy())
        over[sel] = covered(
            busy, comp.loc[sel, "start_us"].to_numpy(), comp.loc[sel, "end_us"].to_numpy()
        )
    dur = comp["dur_us"].to_numpy()
    return np.where(dur > 0, over / np.clip(dur, 1e-9, None), 0.0)


def fit_contention(comp: pd.DataFrame, unit_bytes: dict[str, int]) -> float:
    """Common slow-down α in ``dur = base × (1 + α × busy_frac)`` over same-size units."""
    rows = comp[comp["unit"].isin([u for u in unit_bytes if u != ROOT_UNIT])]
    rows = rows[rows["phase"].isin(_FWD_BWD)].copy()
    if len(rows) < 4:
        return 0.0
    rows["size"] = rows["unit"].map(unit_bytes)
    g = rows.groupby(["phase", "size"])
    mean_d = g["dur_us"].transform("mean")
    mean_f = g["busy_frac"].transform("mean")
    dev = (rows["busy_frac"] - mean_f).to_numpy()
    if float(dev.std()) < MIN_BUSY_SPREAD:
        return 0.0  # every unit equally busy: α cannot be told from the base duration
    # Within a group, dur - mean(dur) = base × α × (busy - mean(busy)), with
    # base = mean(dur) / (1 + α × mean(busy)): least squares for α with base from the
    # previous α, repeated to the fixed point (from α = 0 the first step under-fits by
    # 1 / (1 + α × mean(busy))).
    y = (rows["dur_us"] - mean_d).to_numpy()
    d, f = mean_d.to_numpy(), mean_f.to_numpy()
    alpha = new = 0.0
    for _ in range(50):
        x = d / (1 + alpha * f) * dev
        den = float((x * x).sum())
        new = float(np.clip((x * y).sum() / den, 0.0, MAX_CONTENTION)) if den > 0 else 0.0
        if abs(new - alpha) < 1e-9:
            break
        alpha = new
    return new


def fit_contention_across(runs: Sequence[pd.DataFrame], unit_bytes: dict[str, int]) -> float:
    """α from several runs of one workload (each a compute table as in ``Calibration.
    compute_rows``), fitted *between* the runs: per run and (phase, unit), the mean duration
    divided by the run's speed (its mean forward compute per unit over the mean of the runs)
    against the mean busy fraction; ``d = base[phase, unit] × (1 + α × f)`` by least
    squares, each (phase, unit) its own base, solved at the fixed point. Between runs is
    what a change of policy changes (within one run the units' fractions may all be alike,
    and a unit busier than its neighbours in the same run is a weaker signal)."""
    units = [u for u in unit_bytes if u != ROOT_UNIT]
    fwd = [
        r[(r["phase"] == Phase.FWD.value) & r["unit"].isin(units)]["dur_us"].mean() for r in runs
    ]
    ok = [i for i, f in enumerate(fwd) if np.isfinite(f) and f > 0]
    if len(ok) < 2:
        return 0.0
    ref = float(np.mean([fwd[i] for i in ok]))
    per_run = []
    for k, i in enumerate(ok):
        r = runs[i][runs[i]["unit"].isin(units) & runs[i]["phase"].isin(_FWD_BWD)]
        r = r.assign(dur_us=r["dur_us"] * ref / fwd[i], run=k)
        per_run.append(r.groupby(["run", "phase", "unit"])[["dur_us", "busy_frac"]].mean())
    cells = pd.concat(per_run).reset_index()
    key = cells["phase"].astype(str) + "/" + cells["unit"].astype(str)
    spread = cells.groupby(key)["busy_frac"].transform(lambda v: v.max() - v.min())
    if float(spread.max()) < MIN_BUSY_SPREAD:
        return 0.0  # every run equally busy: α cannot be told
    y, f = cells["dur_us"].to_numpy(), cells["busy_frac"].to_numpy()
    alpha = 0.0
    for _ in range(100):
        base = pd.Series(y / (1 + alpha * f)).groupby(key.to_numpy()).transform("mean").to_numpy()
        x = base * f
        den = float((x * x).sum())
        new = float(np.clip((x * (y - base)).sum() / den, 0.0, MAX_CONTENTION)) if den > 0 else 0.0
        if abs(new - alpha) < 1e-9:
            break
        alpha = new
    return alpha
