"""Cross-rank matching of collectives: transfer vs waiting for peers, bandwidth, stragglers.

One collective is the set of communication rows with the same ``(group, step, seq)`` on
different ranks (``seq`` counts the collectives of a group within a step on each rank). For a
collective seen on two or more ranks:

* ``transfer_us``: the fastest rank's duration (every rank waits for the last to arrive, so
  the shortest duration is the one that did not wait);
* ``peer_wait_us``: the rest, summed over ranks (``dur - transfer`` per rank);
* ``straggler_rank``: the rank that started last (the one the others waited for), and
  ``straggler_lag_us`` how much later it started than the first; the rank is named only
  when the lag exceeds ``lag_uncertainty_us``, how far the two ranks' clocks may be from
  the ones applied (clocks.py), else null: that lag could be an offset;
* ``algbw_gbps = bytes / transfer`` and ``busbw_gbps = algbw * factor`` with nccl-tests'
  factors ((n-1)/n all-gather and reduce-scatter, 2(n-1)/n all-reduce, 1 otherwise; n the
  ranks of its process group, trace/groups/assign.py), in
  GB/s (1e9 bytes/s);
* ``exposed_transfer_us``: its exposed transfer (waiting/comm_causes.py), mean over its ranks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from overlapscope.analysis.waiting.comm_causes import PART_COLUMNS
from overlapscope.phases import CollectiveKind
from overlapscope.trace.groups.assign import parse_label

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
    "lag_uncertainty_us",
    "algbw_gbps",
    "busbw_gbps",
    "exposed_transfer_us",
]


# The collective_ranks table's columns.
RANK_COLUMNS = ["rank", *KEY, "dur_us", "peer_wait_us", "exposed_us", *PART_COLUMNS]


def _stragglers(agg: pd.DataFrame, uncertainty: pd.Series | None) -> pd.DataFrame:
    """``straggler_lag_us`` (last start - first start) and ``lag_uncertainty_us`` (the two
    ranks' clock uncertainties, clocks.py) of each collective on several ranks; its
    straggler named only where the lag exceeds the uncertainty (a lag the clocks cannot tell
    from an offset names none)."""
    multi = agg["num_ranks"] >= 2
    agg["straggler_lag_us"] = (agg["last_start_us"] - agg["start_us"]).where(multi)
    u = uncertainty if uncertainty is not None else pd.Series(dtype=np.float64)
    agg["lag_uncertainty_us"] = (
        agg["straggler_rank"].map(u).fillna(0.0) + agg["first_rank"].map(u).fillna(0.0)
    ).where(multi)
    sure = multi & (agg["straggler_lag_us"] > agg["lag_uncertainty_us"])
    agg["straggler_rank"] = agg["straggler_rank"].where(sure).astype("Int64")
    return agg


def _bus_factors(agg: pd.DataFrame, world_size: int) -> pd.Series:
    """nccl-tests' busbw / algbw of each collective, n its group's ranks (trace/groups/assign.py:
    a group of part of the job names them; any other group is the whole job's)."""
    sizes = {g: len(p[1]) if (p := parse_label(g)) else world_size for g in agg["group"].unique()}
    kinds = {k.value: k for k in CollectiveKind}
    return pd.Series(
        [kinds[k].bus_factor(max(sizes[g], 1)) if k in kinds else 1.0
         for k, g in zip(agg["kind"], agg["group"], strict=True)],
        index=agg.index, dtype=np.float64,
    )  # fmt: skip


def collective_tables(
    comm: pd.DataFrame, world_size: int, uncertainty: pd.Series | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``comm``: counted communication rows with ``exposed_us`` and its parts
    (comm_causes.split_exposure); ``uncertainty``: per rank, how far its clock may be from
    the one applied (clocks.py; None: 0). Returns (collectives, per-rank rows of each
    collective with ``peer_wait_us``)."""
    rows = comm[comm["seq"] >= 0].copy()
    for c in ("group", "kind", "unit", "phase"):
        rows[c] = rows[c].astype(object)
    if rows.empty:
        return pd.DataFrame(columns=COLLECTIVE_COLUMNS), pd.DataFrame(columns=RANK_COLUMNS)
    g = rows.groupby(KEY, sort=True, dropna=False)
    rows["transfer_us"] = g["dur_us"].transform("min")
    rows["num_ranks"] = g["rank"].transform("size")
    rows["peer_wait_us"] = np.where(
        rows["num_ranks"] >= 2, rows["dur_us"] - rows["transfer_us"], np.nan
    )
    last, first = (
        rows.loc[at.to_numpy(), [*KEY, "rank"]].rename(columns={"rank": name})
        for at, name in (
            (g["ts_us"].idxmax(), "straggler_rank"),
            (g["ts_us"].idxmin(), "first_rank"),
        )
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
        exposed_transfer_us=("exposed_transfer_us", "mean"),
    ).reset_index()
    agg = _stragglers(
        agg.merge(last, on=KEY, how="left").merge(first, on=KEY, how="left"), uncertainty
    )
    agg["peer_wait_us"] = agg["peer_wait_us"].where(agg["num_ranks"] >= 2)
    factor = _bus_factors(agg, world_size)
    # Kineto writes -1 for an unknown size: unknown stays unknown (null), not a size.
    agg["bytes"] = agg["bytes"].astype(np.float64).where(agg["bytes"] >= 0)
    known = (agg["bytes"] > 0) & (agg["transfer_us"] > 0)
    agg["algbw_gbps"] = (agg["bytes"] / agg["transfer_us"] / 1e3).where(known)
    agg["busbw_gbps"] = agg["algbw_gbps"] * factor
    per_rank = rows[RANK_COLUMNS].reset_index(drop=True)
    return agg[COLLECTIVE_COLUMNS], per_rank
