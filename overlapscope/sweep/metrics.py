"""Pure table functions: one analysed run -> one metrics record; records -> a summary table.

Per run (all times per training step, over the profiled steps):

- ``step_time_per_step_ms``: per step the slowest rank's step time, median over steps;
- ``exposed_comm_per_step_ms`` / ``nccl_wait_per_step_ms``: per step the mean over ranks, median over steps;
- ``overlap_pct``: the analysis' per-rank ``overlap_pct`` (|comm ∩ compute| / |comm|), mean
  over ranks;
- ``peak_mem_mib``: the largest per-rank peak from ``run.json``;
- ``throughput_samples_s``: global batch / step time.

Over repeats (:func:`summarize`): the median of each, plus the min, max and spread
(``(max - min) / median``) of the step time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from overlapscope.analysis import RunAnalysis

RUN_COLUMNS = [
    "config",
    "repeat",
    "step_time_per_step_ms",
    "throughput_samples_s",
    "exposed_comm_per_step_ms",
    "nccl_wait_per_step_ms",
    "overlap_pct",
    "peak_mem_mib",
]

SUMMARY_COLUMNS = [
    "config",
    "policy",
    "forward_prefetch",
    "limit_all_gathers",
    "repeats",
    "step_time_per_step_ms",
    "step_time_per_step_min_ms",
    "step_time_per_step_max_ms",
    "step_time_spread_pct",
    "throughput_samples_s",
    "exposed_comm_per_step_ms",
    "nccl_wait_per_step_ms",
    "overlap_pct",
    "peak_mem_mib",
]


def run_metrics(
    analysis: RunAnalysis, peak_mem_bytes: list[int], global_batch: int
) -> dict[str, float]:
    """The metrics of one analysed run (see the module docstring)."""
    steps = analysis.steps
    if steps.empty:
        raise ValueError("the run has no counted steps to summarise")
    per_step = steps.groupby("step", observed=True).agg(
        step_time_us=("step_time_us", "max"),
        exposed_comm_us=("exposed_comm_us", "mean"),
        nccl_wait_us=("nccl_wait_us", "mean"),
    )
    step_time_per_step_ms = float(per_step["step_time_us"].median()) / 1e3
    return {
        "step_time_per_step_ms": step_time_per_step_ms,
        "throughput_samples_s": global_batch / (step_time_per_step_ms / 1e3),
        "exposed_comm_per_step_ms": float(per_step["exposed_comm_us"].median()) / 1e3,
        "nccl_wait_per_step_ms": float(per_step["nccl_wait_us"].median()) / 1e3,
        "overlap_pct": float(analysis.ranks["overlap_pct"].mean()),
        "peak_mem_mib": max(peak_mem_bytes) / 2**20,
    }


def summarize(runs: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration (in ``points`` order) from the per-run records.

    ``runs``: columns :data:`RUN_COLUMNS`. ``points``: ``config, policy, forward_prefetch,
    limit_all_gathers``, one row per configuration.
    """
    g = runs.groupby("config", sort=False)
    med = g[RUN_COLUMNS[2:]].median()
    agg = pd.DataFrame(
        {
            "repeats": g.size(),
            "step_time_per_step_ms": med["step_time_per_step_ms"],
            "step_time_per_step_min_ms": g["step_time_per_step_ms"].min(),
            "step_time_per_step_max_ms": g["step_time_per_step_ms"].max(),
            "throughput_samples_s": med["throughput_samples_s"],
            "exposed_comm_per_step_ms": med["exposed_comm_per_step_ms"],
            "nccl_wait_per_step_ms": med["nccl_wait_per_step_ms"],
            "overlap_pct": med["overlap_pct"],
            "peak_mem_mib": med["peak_mem_mib"],
        }
    )
    agg["step_time_spread_pct"] = (
        100
        * (agg["step_time_per_step_max_ms"] - agg["step_time_per_step_min_ms"])
        / agg["step_time_per_step_ms"]
    )
    out = points.merge(agg, left_on="config", right_index=True, how="left", validate="1:1")
    out["repeats"] = out["repeats"].fillna(0).astype(np.int64)
    return out[SUMMARY_COLUMNS].reset_index(drop=True)
