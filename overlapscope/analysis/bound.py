"""How far a run is from the overlap bound.

Per rank, with per-step means of each unit's compute ``T_comp`` and communication ``T_comm``
(all phases of the unit; compute and communication that belong to no unit form one more
"unit")::

    serial = Σ_units (T_comp + T_comm)      nothing overlaps
    ideal  = Σ_units max(T_comp, T_comm)    each unit's transfer fully hidden (or hiding)
    actual = the measured mean step time
    overlap_efficiency = (serial - actual) / (serial - ideal)

1.0 means the run reaches the bound, 0 means it is as slow as running everything serially;
values outside [0, 1] are possible (overheads, idle time, or overlap across units).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

BOUND_COLUMNS = ["rank", "serial_us", "ideal_us", "actual_us", "overlap_efficiency", "num_units"]


def bound_table(units: pd.DataFrame, compute: pd.DataFrame, ranks: pd.DataFrame) -> pd.DataFrame:
    """``units``: the per-unit comm table; ``compute``: compute µs per (rank, unit);
    ``ranks``: the per-rank table (``num_steps``, ``mean_step_time_us``)."""
    comm = (
        units.assign(unit=units["unit"].fillna(""))
        .groupby(["rank", "unit"])["comm_us"]
        .sum()
        .rename("comm_us")
        .reset_index()
    )
    both = comm.merge(compute, on=["rank", "unit"], how="outer").fillna(
        {"comm_us": 0.0, "compute_us": 0.0}
    )
    steps = ranks.set_index("rank")["num_steps"].clip(lower=1)
    per = both["rank"].map(steps).astype(float)
    both["t_comm"] = both["comm_us"] / per
    both["t_comp"] = both["compute_us"] / per
    both["serial"] = both["t_comm"] + both["t_comp"]
    both["ideal"] = np.maximum(both["t_comm"], both["t_comp"])
    out = (
        both.groupby("rank")
        .agg(serial_us=("serial", "sum"), ideal_us=("ideal", "sum"), num_units=("unit", "size"))
        .reset_index()
    )
    out["actual_us"] = out["rank"].map(ranks.set_index("rank")["mean_step_time_us"])
    gap = out["serial_us"] - out["ideal_us"]
    out["overlap_efficiency"] = ((out["serial_us"] - out["actual_us"]) / gap).where(gap > 0)
    return out[BOUND_COLUMNS]


def bound_summary(bound: pd.DataFrame) -> dict[str, float]:
    """Means over ranks of the bound table (NaN when empty)."""
    if bound.empty:
        nan = float("nan")
        return {"serial_us": nan, "ideal_us": nan, "actual_us": nan, "overlap_efficiency": nan}
    serial = float(bound["serial_us"].mean())
    ideal = float(bound["ideal_us"].mean())
    actual = float(bound["actual_us"].mean())
    eff = (serial - actual) / (serial - ideal) if serial > ideal else float("nan")
    return {"serial_us": serial, "ideal_us": ideal, "actual_us": actual, "overlap_efficiency": eff}
