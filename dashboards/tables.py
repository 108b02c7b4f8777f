"""Overview, findings and trade-off rows, built from ``RunAnalysis`` tables and run.json.

Only unit conversions (µs -> ms, bytes -> MiB), per-step means of the analysis' totals and
display aggregates (median over collectives, mean/max over ranks) happen here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from dashboards.data import LoadedRun
from overlapscope.analysis.findings.text import SHOWN_ITEMS, item_line, lever_line, where_line
from overlapscope.manifest import RunManifest, config_label

OVERVIEW_COLUMNS: tuple[str, ...] = (
    "run",
    "policy",
    "rank",
    "step_ms",
    "throughput_tok_s",
    "exposed_comm_per_step_ms",
    "nccl_wait_per_step_ms",
    "overlap_pct",
    "peak_mem_mib",
    "busbw_gbit_s",
)
OVERVIEW_HEADERS: dict[str, str] = {
    "run": "run",
    "policy": "policy",
    "rank": "rank",
    "step_ms": "step time (ms)",
    "throughput_tok_s": "throughput (tokens/s)",
    "exposed_comm_per_step_ms": "exposed comm (ms/step)",
    "nccl_wait_per_step_ms": "NCCL wait (ms/step)",
    "overlap_pct": "overlap (%)",
    "peak_mem_mib": "peak memory (MiB)",
    "busbw_gbit_s": "bus bandwidth (Gbit/s, median)",
}
FINDING_COLUMNS: tuple[str, ...] = (
    *("run", "title", "rank", "stake_ms", "where", "evidence", "items", "levers"),
)


def _tokens_per_step(m: RunManifest | None) -> float:
    if m is None or m.config is None:
        return float("nan")
    return float(m.config.global_batch * m.config.model.seq_len)


def _peak_mem_mib(m: RunManifest | None, ranks: pd.Series) -> np.ndarray:
    out = np.full(len(ranks), np.nan)
    if m is not None and m.peak_mem_bytes:
        peaks = np.asarray(m.peak_mem_bytes, dtype=float)
        idx = ranks.to_numpy()
        ok = (idx >= 0) & (idx < len(peaks))
        out[ok] = peaks[idx[ok]] / 2**20
    return out


def policy_label(run: LoadedRun) -> str:
    """Policy, then what differs from the defaults (run.json; ``manifest.config_label``)."""
    m = run.manifest
    return config_label(m.engine) if m and m.engine else str(run.source.policy or "?")


def overview_table(runs: Sequence[LoadedRun]) -> pd.DataFrame:
    """One row per (run, rank): the columns of ``OVERVIEW_COLUMNS``."""
    frames = []
    for run in runs:
        ranks = run.analysis.ranks
        busbw = run.analysis.collectives["busbw_gbps"]
        frames.append(
            pd.DataFrame(
                {
                    "run": run.source.label,
                    "policy": policy_label(run),
                    "rank": ranks["rank"].astype(int),
                    "step_ms": ranks["step_time_per_step_us"] / 1e3,
                    "throughput_tok_s": _tokens_per_step(run.manifest)
                    / (ranks["step_time_per_step_us"] / 1e6),
                    "exposed_comm_per_step_ms": ranks["exposed_comm_per_step_us"] / 1e3,
                    "nccl_wait_per_step_ms": ranks["nccl_wait_per_step_us"] / 1e3,
                    "overlap_pct": ranks["overlap_pct"],
                    "peak_mem_mib": _peak_mem_mib(run.manifest, ranks["rank"]),
                    # GB/s in the analysis; Gbit/s here, the unit links are given in
                    "busbw_gbit_s": float(busbw.median()) * 8 if len(busbw) else float("nan"),
                }
            )
        )
    if not frames:
        return pd.DataFrame({c: [] for c in OVERVIEW_COLUMNS})
    return pd.concat(frames, ignore_index=True)[list(OVERVIEW_COLUMNS)]


def tradeoff_table(overview: pd.DataFrame) -> pd.DataFrame:
    """One row per run: mean step time and throughput over ranks, max peak memory."""
    grouped = overview.groupby(["run", "policy"], sort=False)
    out = grouped.agg(
        step_ms=("step_ms", "mean"),
        throughput_tok_s=("throughput_tok_s", "mean"),
        exposed_comm_per_step_ms=("exposed_comm_per_step_ms", "mean"),
        peak_mem_mib=("peak_mem_mib", "max"),
    )
    return out.reset_index()


def findings_table(runs: Sequence[LoadedRun]) -> pd.DataFrame:
    """The diagnose findings of every run, largest stake first within a run."""
    rows = [
        {
            "run": run.source.label,
            "title": f.title,
            "rank": f.rank,
            "stake_ms": f.stake_us / 1e3,
            "where": where_line(f),
            "evidence": f.summary,
            "items": [item_line(e) for e in f.evidence[:SHOWN_ITEMS]],
            "levers": [lever_line(lv, f.stake_us) for lv in f.levers],
        }
        for run in runs
        for f in run.analysis.findings
    ]
    return pd.DataFrame(rows, columns=list(FINDING_COLUMNS))


def unit_sort_key(unit: str) -> tuple[int, str, int]:
    """``root`` first, then ``blocks.2`` before ``blocks.10``; ``all`` last."""
    if unit == "root":
        return (0, "", 0)
    if unit == "all":
        return (2, "", 0)
    m = re.match(r"^(.*?)(\d+)$", unit)
    return (1, m.group(1), int(m.group(2))) if m else (1, unit, -1)


def straggler_summary(collectives: pd.DataFrame) -> list[str]:
    """One line per rank that started last at some collective, most often first."""
    matched = collectives[collectives["num_ranks"] > 1]
    if matched.empty:
        return []
    total = len(matched)
    g = matched.groupby("straggler_rank")["straggler_lag_us"]
    stats = pd.DataFrame({"n": g.size(), "lag": g.median()}).sort_values("n", ascending=False)
    lines = [
        f"rank {int(r)} started last at {int(s.n)} of {total} collectives "
        f"({100 * s.n / total:.0f}%), median lag {s.lag / 1e3:.2f} ms"
        for r, s in stats.iterrows()
    ]
    unsure = int(matched["straggler_rank"].isna().sum())
    if unsure:
        lines.append(
            f"{unsure} of {total} collectives: no rank started last by more than the clocks' "
            "uncertainty (their lag could be a clock offset)"
        )
    return lines


# --- what-if --------------------------------------------------------------------------------

# Prediction.table()'s metrics: (shown as, factor to the shown unit).
WHATIF_METRICS: dict[str, tuple[str, float]] = {
    "step_time_us": ("step time (ms)", 1e-3),
    "exposed_comm_us": ("exposed comm (ms/step)", 1e-3),
    "nccl_wait_us": ("NCCL wait (ms/step)", 1e-3),
    "peak_mem_bytes": ("peak memory (MiB)", 1 / 2**20),
}
WHATIF_COLUMNS: tuple[str, ...] = (
    "metric",
    "measured_source",
    "predicted",
    "change_pct",
    "measured_target",
    "error_pct",
)


def whatif_table(table: pd.DataFrame) -> pd.DataFrame:
    """``Prediction.table(...)`` for display: one row per metric in ms / MiB, the predicted
    change against the source run, and (NaN when no target was given) the measured target and
    the prediction's error against it. A metric not in ``WHATIF_METRICS`` keeps its name and
    unit."""
    names = table["metric"].map({m: v[0] for m, v in WHATIF_METRICS.items()})
    scale = table["metric"].map({m: v[1] for m, v in WHATIF_METRICS.items()}).fillna(1.0)
    source = table["measured_source"] * scale
    predicted = table["predicted"] * scale
    target = (
        table["measured_target"] * scale
        if "measured_target" in table
        else pd.Series(np.nan, index=table.index)
    )
    error = table["error_pct"] if "error_pct" in table else pd.Series(np.nan, index=table.index)
    change = 100 * (predicted - source) / source.where(source != 0)
    return pd.DataFrame(
        {
            "metric": names.fillna(table["metric"]),
            "measured_source": source,
            "predicted": predicted,
            "change_pct": change,
            "measured_target": target,
            "error_pct": error.astype(float),
        }
    )[list(WHATIF_COLUMNS)]
