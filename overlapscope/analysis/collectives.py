"""Cross-rank matching of collectives: transfer vs waiting for peers, bandwidth, stragglers.

One collective is the set of communication rows with the same ``(group, step, seq)`` on
different ranks (``seq`` counts the collectives of a group within a step on each rank). For a
collective seen on two or more ranks:

* ``transfer_us``: the fastest rank's duration (every rank waits for the last to arrive, so
  the shortest duration is the one that did not wait);
* ``peer_wait_us``: the rest, summed over ranks (``dur - transfer`` per rank);
* ``straggler_rank``: the rank that started last (the one the others waited for), and
  ``straggler_lag_us`` how much later it started than the first;
* ``algbw_gbps = bytes / transfer`` and ``busbw_gbps = algbw * factor`` with nccl-tests'
  factors ((n-1)/n all-gather and reduce-scatter, 2(n-1)/n all-reduce, 1 otherwise), in
  GB/s (1e9 bytes/s).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from overlapscope.phases import CollectiveKind

KEY = ["group", "step", "seq"]
COLLECTIVE_COLUMNS = [
    "group",
    "step",
    "seq",
    "kind",
    "unit",
    "phase",
    "bytes",
    "num_ranks",
    "start_us",
    "end_us",
    "transfer_us",
    "max_dur_us",
    "peer_wait_us",
    "straggler_rank",
    "straggler_lag_us",
    "algbw_gbps",
    "busbw_gbps",
]


def collective_tables(comm: pd.DataFrame, world_size: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``comm``: counted communication rows with ``exposed_us``. Returns (collectives,
    per-rank rows of each collective with ``peer_wait_us``)."""
    rows = comm[comm["seq"] >= 0].copy()
    for c in ("group", "kind", "unit", "phase"):
        rows[c] = rows[c].astype(object)
    if rows.empty:
        return (
            pd.DataFrame(columns=COLLECTIVE_COLUMNS),
            pd.DataFrame(columns=["rank", *KEY, "dur_us", "peer_wait_us", "exposed_us"]),
        )
    g = rows.groupby(KEY, sort=True, dropna=False)
    rows["transfer_us"] = g["dur_us"].transform("min")
    rows["num_ranks"] = g["rank"].transform("size")
    rows["peer_wait_us"] = np.where(
        rows["num_ranks"] >= 2, rows["dur_us"] - rows["transfer_us"], np.nan
    )
    last = rows.loc[g["ts_us"].idxmax().to_numpy(), [*KEY, "rank"]].rename(
        columns={"rank": "straggler_rank"}
    )
    agg = g.agg(
        kind=("kind", "first"),
        unit=("unit", "first"),
        phase=("phase", "first"),
        bytes=("bytes", "max"),
        num_ranks=("rank", "size"),
        start_us=("ts_us", "min"),
        last_start_us=("ts_us", "max"),
        end_us=("end_us", "max"),
        transfer_us=("dur_us", "min"),
        max_dur_us=("dur_us", "max"),
        peer_wait_us=("peer_wait_us", "sum"),
    ).reset_index()
    agg = agg.merge(last, on=KEY, how="left")
    multi = agg["num_ranks"] >= 2
    agg["straggler_rank"] = agg["straggler_rank"].where(multi).astype("Int64")
    agg["straggler_lag_us"] = (agg["last_start_us"] - agg["start_us"]).where(multi)
    agg["peer_wait_us"] = agg["peer_wait_us"].where(multi)
    factor = (
        agg["kind"]
        .map({k.value: k.bus_factor(max(world_size, 1)) for k in CollectiveKind})
        .fillna(1.0)
    )
    # Kineto writes -1 for an unknown size: unknown stays unknown (null), not a size.
    agg["bytes"] = agg["bytes"].astype(np.float64).where(agg["bytes"] >= 0)
    known = (agg["bytes"] > 0) & (agg["transfer_us"] > 0)
    agg["algbw_gbps"] = (agg["bytes"] / agg["transfer_us"] / 1e3).where(known)
    agg["busbw_gbps"] = agg["algbw_gbps"] * factor
    per_rank = rows[["rank", *KEY, "dur_us", "peer_wait_us", "exposed_us"]].reset_index(drop=True)
    return agg[COLLECTIVE_COLUMNS], per_rank
