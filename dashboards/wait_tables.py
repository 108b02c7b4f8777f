"""The tables of where the GPU waits (issue 30), for the units and ranks tabs: each unit's
exposed time by cause, and what the host did while the GPU waited for it. Only unit
conversions (µs -> ms) and display aggregates (mean over ranks, top N) happen here."""

from __future__ import annotations

import pandas as pd

UNIT_SPLIT_COLUMNS: tuple[str, ...] = (
    "unit",
    "phase",
    "exposed_ms",
    "host_late_ms",
    "peer_wait_ms",
    "transfer_ms",
)
UNIT_SPLIT_HEADERS: dict[str, str] = {
    "unit": "unit",
    "phase": "phase",
    "exposed_ms": "exposed (ms/step)",
    "host_late_ms": "issued late by the host",
    "peer_wait_ms": "waiting for the last rank",
    "transfer_ms": "transfer longer than compute",
}
HOST_OP_COLUMNS: tuple[str, ...] = ("host_activity", "host_op", "cause", "num_gaps", "idle_ms")
HOST_OP_HEADERS: dict[str, str] = {
    "host_activity": "the thread was doing",
    "host_op": "CPU op (innermost, mid-gap)",
    "cause": "cause",
    "num_gaps": "gaps",
    "idle_ms": "GPU idle (ms/step, mean over ranks)",
}
TOP_N = 10


def unit_split_table(units: pd.DataFrame) -> pd.DataFrame:
    """Per (unit, phase): its exposed time and the three parts, ms per step, mean over
    ranks, most exposed first."""
    parts = {
        "exposed_ms": "exposed_per_step_us",
        "host_late_ms": "exposed_host_late_per_step_us",
        "peer_wait_ms": "exposed_peer_wait_per_step_us",
        "transfer_ms": "exposed_transfer_per_step_us",
    }
    if units.empty or not set(parts.values()) <= set(units.columns):
        return pd.DataFrame(columns=list(UNIT_SPLIT_COLUMNS))
    u = units.assign(unit=units["unit"].astype(str), phase=units["phase"].astype(str))
    per_rank = u.groupby(["rank", "unit", "phase"], as_index=False)[list(parts.values())].sum()
    mean = per_rank.groupby(["unit", "phase"], as_index=False)[list(parts.values())].mean()
    out = mean.assign(**{ms: mean[us] / 1e3 for ms, us in parts.items()})
    out = out[out["exposed_ms"] > 0].sort_values("exposed_ms", ascending=False)
    return out[list(UNIT_SPLIT_COLUMNS)].head(TOP_N).reset_index(drop=True)


def host_ops_table(ops: pd.DataFrame, num_ranks: int, num_steps: float) -> pd.DataFrame:
    """The CPU ops the launching thread was in while the GPU sat idle for it (host-caused
    gaps, ``RunAnalysis.host_ops``), by GPU idle time, ms per step and mean over ranks."""
    if ops.empty:
        return pd.DataFrame(columns=list(HOST_OP_COLUMNS))
    g = ops.groupby(["host_activity", "host_op", "cause"], as_index=False, dropna=False)
    out = g.agg(num_gaps=("num_gaps", "sum"), idle_us=("dur_total_us", "sum"))
    out["idle_ms"] = out["idle_us"] / 1e3 / max(num_ranks, 1) / max(num_steps, 1.0)
    out = out.sort_values("idle_ms", ascending=False)
    return out[list(HOST_OP_COLUMNS)].head(TOP_N).reset_index(drop=True)
