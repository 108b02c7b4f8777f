"""Memory levers in the timeline: activation recomputation and CPU-offload copies.

``lever_table``: one row per (rank, unit, phase) for the phase ``recompute`` and every copy
phase of the phase table (``phases.COPY_PHASES``: ``h2d``, ``d2h``):

- ``time_*_us``: their summed duration (recompute: the extra compute checkpointing costs;
  copies: the copy time);
- ``exposed_*_us`` (copies only): copy time during which no compute runs on the rank;
- ``hides_comm_*_us`` (recompute only): communication time that runs under the recomputation
  (compute that hides communication);
- ``*_per_step``: the same divided by the rank's counted steps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from overlapscope.analysis.intervals import covered, union
from overlapscope.analysis.timeline.metrics import by_rank, counted_rows
from overlapscope.phases import COPY_PHASES, Lane, Phase, values
from overlapscope.trace.run.loader import RunTraces

LEVER_PHASES = (Phase.RECOMPUTE.value, *values(COPY_PHASES))
LEVER_COLUMNS = [
    "rank",
    "unit",
    "phase",
    "time_total_us",
    "exposed_total_us",
    "hides_comm_total_us",
    "time_per_step_us",
    "exposed_per_step_us",
    "hides_comm_per_step_us",
]


def lever_table(run: RunTraces, counted: pd.Series) -> pd.DataFrame:
    ev = counted_rows(run, counted)
    parts = []
    for rank, rows in by_rank(ev):
        # Categorical comparisons (by code) and the two columns the sets need: no column of
        # strings, no copy of the rows.
        lev = rows[rows["phase"].isin(LEVER_PHASES).to_numpy()]
        if lev.empty:
            continue
        starts, ends = rows["ts_us"].to_numpy(), rows["end_us"].to_numpy()
        comp = (rows["lane"] == Lane.COMPUTE.value).to_numpy()
        comm = (rows["lane"] == Lane.COMM.value).to_numpy()
        compute_set = union(starts[comp], ends[comp])
        comm_set = union(starts[comm], ends[comm])
        ts, end, dur = (lev[c].to_numpy() for c in ("ts_us", "end_us", "dur_us"))
        is_recompute = (lev["phase"].astype(object) == Phase.RECOMPUTE.value).to_numpy()
        parts.append(
            pd.DataFrame(
                {
                    "rank": np.int32(rank),
                    "unit": lev["unit"].astype(object).to_numpy(),
                    "phase": lev["phase"].astype(object).to_numpy(),
                    "time": dur,
                    "exposed": np.where(is_recompute, np.nan, dur - covered(compute_set, ts, end)),
                    "hides_comm": np.where(is_recompute, covered(comm_set, ts, end), np.nan),
                }
            )
        )
    if not parts:
        return pd.DataFrame(columns=LEVER_COLUMNS)
    table = (
        pd.concat(parts, ignore_index=True)
        .groupby(["rank", "unit", "phase"], sort=True)
        .sum(min_count=1)
        .reset_index()
    )
    nsteps = {i.rank: max(len(i.steps), 1) for i in run.ranks}
    per = table["rank"].map(nsteps).astype(float)
    for col in ("time", "exposed", "hides_comm"):
        table[f"{col}_total_us"] = table[col]
        table[f"{col}_per_step_us"] = table[col] / per
    return table[LEVER_COLUMNS]
