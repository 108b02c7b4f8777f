"""How far a run is from the overlap bound.

Per rank, with per-step means of each unit's compute ``T_comp`` and communication ``T_comm``
(summed durations of the unit's compute and collectives, all phases; compute and
communication that belong to no unit form one more "unit")::

    serial = Σ_units (T_comp + T_comm)      nothing overlaps
    ideal  = Σ_units max(T_comp, T_comm)    each unit's transfer fully hidden (or hiding)
    actual = compute + exposed comm          per step, from the partition
    overlap_efficiency = (serial - actual) / (serial - ideal), clipped to [0, 1]

``actual`` leaves out idle, exposed memory copies and other time (they are in the step but
are not what overlap changes), so ``actual <= serial`` always holds. 1.0: the run reaches
the bound (or overlaps across units beyond it); 0: as slow as running everything serially;
null when there is nothing to overlap (``serial == ideal``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

BOUND_COLUMNS = [
    "rank",
    "serial_per_step_us",
    "ideal_per_step_us",
    "actual_per_step_us",
    "step_time_per_step_us",
    "overlap_efficiency",
    "num_units",
]


def bound_table(units: pd.DataFrame, compute: pd.DataFrame, ranks: pd.DataFrame) -> pd.DataFrame:
    """``units``: the per-unit comm table; ``compute``: ``compute_total_us`` per (rank,
    unit); ``ranks``: the per-rank table."""
    comm = (
        units.assign(unit=units["unit"].fillna(""))
        .groupby(["rank", "unit"])["comm_total_us"]
        .sum()
        .reset_index()
    )
    both = comm.merge(compute, on=["rank", "unit"], how="outer").fillna(
        {"comm_total_us": 0.0, "compute_total_us": 0.0}
    )
    by_rank = ranks.set_index("rank")
    per = both["rank"].map(by_rank["num_steps"].clip(lower=1)).astype(float)
    t_comm = both["comm_total_us"] / per
    t_comp = both["compute_total_us"] / per
    both = both.assign(serial=t_comm + t_comp, ideal=np.maximum(t_comm, t_comp))
    out = (
        both.groupby("rank")
        .agg(
            serial_per_step_us=("serial", "sum"),
            ideal_per_step_us=("ideal", "sum"),
            num_units=("unit", "size"),
        )
        .reset_index()
    )
    actual = by_rank["compute_per_step_us"] + by_rank["exposed_comm_per_step_us"]
    out["actual_per_step_us"] = out["rank"].map(actual)
    out["step_time_per_step_us"] = out["rank"].map(by_rank["step_time_per_step_us"])
    out["overlap_efficiency"] = efficiency(
        out["serial_per_step_us"], out["ideal_per_step_us"], out["actual_per_step_us"]
    )
    return out[BOUND_COLUMNS]


def efficiency(serial: pd.Series, ideal: pd.Series, actual: pd.Series) -> pd.Series:
    """``(serial - actual) / (serial - ideal)`` in [0, 1]; NaN where ``serial <= ideal``."""
    gap = (serial - ideal).to_numpy(dtype=np.float64)
    saved = (serial - actual).to_numpy(dtype=np.float64)
    ok = gap > 1e-9
    ratio = np.divide(saved, gap, out=np.full(len(gap), np.nan), where=ok)
    # rounded so float noise does not show as a tiny efficiency at zero overlap
    return pd.Series(np.round(np.clip(ratio, 0.0, 1.0), 6), index=serial.index)


def bound_summary(bound: pd.DataFrame) -> dict[str, float]:
    """Means over ranks of the bound table (NaN when empty)."""
    keys = ["serial_per_step_us", "ideal_per_step_us", "actual_per_step_us"]
    if bound.empty:
        return {k: float("nan") for k in [*keys, "step_time_per_step_us", "overlap_efficiency"]}
    out = {k: float(bound[k].mean()) for k in [*keys, "step_time_per_step_us"]}
    eff = efficiency(
        pd.Series([out["serial_per_step_us"]]),
        pd.Series([out["ideal_per_step_us"]]),
        pd.Series([out["actual_per_step_us"]]),
    )
    out["overlap_efficiency"] = float(eff.iloc[0])
    return out
