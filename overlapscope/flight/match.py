"""Each collective across ranks: the entries of every rank with the same ``(process group,
collective_seq_id)`` (point-to-point: ``(process group, p2p_seq_id)``), one row per
collective (:data:`COLLECTIVE_COLUMNS`) and one per collective and rank
(:data:`RANK_COLUMNS`).

Times are µs from the dumps' earliest issue, on the clocks of clocks.py (each rank's
offset subtracted). Per collective:

* ``last_rank``: the rank that issued it last; ``lag_us``: how much later than the next
  latest (its lag beyond the spread of the other ranks' issue times, ``others_spread_us``);
* ``duration_us``: the median of the ranks' durations where timing was on (NCCL with
  ``TORCH_NCCL_ENABLE_TIMING=1``), and per rank ``peer_wait_us = duration - the shortest
  duration`` (every rank waits for the last to arrive, so the shortest did not wait);
* ``mismatch``: where the ranks disagree on sizes or dtypes, which field and each rank's;
* ``never_issued_by``: the ranks of the group whose dump goes on past no such collective:
  their newest entry of the group is older (a rank that stopped: a hang). A rank whose ring
  buffer has already dropped the collective (it is older than the rank's oldest entry) is
  ``out_of_window``, neither late nor missing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

KEY = ["pg", "is_p2p", "seq_id"]
COLLECTIVE_COLUMNS = [
    *KEY, "op", "phase", "framework", "input_bytes", "num_ranks", "num_expected",
    "first_issue_us", "last_issue_us", "last_rank", "lag_us", "others_spread_us",
    "start_us", "end_us", "duration_us", "peer_wait_us", "mismatch", "never_issued_by",
    "out_of_window",
]  # fmt: skip
RANK_COLUMNS = [
    "rank", *KEY, "issue_us", "start_us", "end_us", "duration_us", "peer_wait_us",
    "behind_us", "state",
]  # fmt: skip
_FIELDS = ("input_sizes", "input_dtypes", "output_sizes", "output_dtypes")


def raw_us(e: pd.DataFrame, name: str, base: int) -> np.ndarray:
    """``<name>_ns`` as µs from ``base`` on the rank's own clock; NaN where not recorded."""
    ns = e[f"{name}_ns"].to_numpy(np.int64)
    return np.where(ns > 0, (ns - base).astype(np.float64) / 1e3, np.nan)


def _times(e: pd.DataFrame, base: int, off: np.ndarray) -> pd.DataFrame:
    out = {}
    for name in ("issue", "start", "end"):
        out[f"{name}_us"] = raw_us(e, name, base) - off
    return e.assign(**out)


def base_ns(entries: pd.DataFrame) -> int:
    issued = entries["issue_ns"].to_numpy(np.int64)
    return int(issued[issued > 0].min()) if (issued > 0).any() else 0


def with_key(entries: pd.DataFrame) -> pd.DataFrame:
    seq_id = np.where(entries["is_p2p"], entries["p2p_seq"], entries["seq"])
    return entries.assign(pg=entries["pg"].astype(str), seq_id=seq_id.astype(np.int64))


def _mismatch(rows: pd.DataFrame) -> pd.Series:
    """Per collective whose ranks disagree on a size or dtype: ``field: rank r value, ...``."""
    g = rows.groupby(KEY, sort=False, observed=True)
    out: dict[tuple[object, ...], str] = {}
    for field in _FIELDS:
        n = g[field].nunique()
        for key in n.index[n > 1]:
            sub = g.get_group(key)
            each = ", ".join(f"rank {r} {v}" for r, v in zip(sub["rank"], sub[field], strict=True))
            out.setdefault(key, f"{field}: {each}")
    idx = pd.MultiIndex.from_tuples(list(out), names=KEY) if out else None
    return pd.Series(list(out.values()), index=idx, dtype=object)


def _lags(rows: pd.DataFrame) -> pd.DataFrame:
    """Per collective: last rank, its lag beyond the next latest, the others' spread."""
    s = rows.sort_values([*KEY, "issue_us"], kind="stable")
    g = s.groupby(KEY, sort=False, observed=True)
    n = g["rank"].transform("size").to_numpy()
    pos = g.cumcount().to_numpy()
    last = s[pos == n - 1].set_index(KEY)
    second = s[(pos == n - 2)].set_index(KEY)["issue_us"]
    first = g["issue_us"].min()
    out = pd.DataFrame({"last_rank": last["rank"], "last_issue_us": last["issue_us"]})
    out["lag_us"] = out["last_issue_us"] - second.reindex(out.index)
    out["others_spread_us"] = second.reindex(out.index) - first.reindex(out.index)
    return out


def expected_ranks(
    pg_ranks: dict[str, tuple[int, ...]], pg: str, all_ranks: tuple[int, ...]
) -> tuple[int, ...]:
    return pg_ranks.get(pg) or all_ranks


def _absent(rows: pd.DataFrame, agg: pd.DataFrame, pg_ranks: dict[str, tuple[int, ...]],
            all_ranks: tuple[int, ...]) -> pd.DataFrame:  # fmt: skip
    """``never_issued_by`` and ``out_of_window``: the group's ranks without the collective,
    by whether their dump's entries of the group end before it or start after it."""
    expected = [len(expected_ranks(pg_ranks, k[0], all_ranks)) for k in agg.index]
    agg = agg.assign(num_expected=expected, never_issued_by=None, out_of_window=None)
    short = agg.index[agg["num_ranks"].to_numpy() < np.asarray(expected)]
    if not len(short):
        return agg
    span = rows.groupby(["pg", "is_p2p", "rank"], observed=True)["seq_id"].agg(["min", "max"])
    have = rows.set_index(KEY).loc[short].groupby(level=KEY, observed=True)["rank"].agg(set)
    for key in short:
        pg, p2p, seq = key
        absent = [r for r in expected_ranks(pg_ranks, pg, all_ranks) if r not in have[key]]
        lo = [
            r for r in absent if (pg, p2p, r) in span.index and seq < span.loc[(pg, p2p, r), "min"]
        ]
        agg.loc[key, "never_issued_by"] = ",".join(str(r) for r in absent if r not in lo) or None
        agg.loc[key, "out_of_window"] = ",".join(str(r) for r in lo) or None
    return agg


def match(entries: pd.DataFrame, offset_us: np.ndarray, pg_ranks: dict[str, tuple[int, ...]]
          ) -> tuple[pd.DataFrame, pd.DataFrame]:  # fmt: skip
    """(collectives, per-rank rows) of the keyed entries (:func:`with_key`), each row's
    clock offset (clocks.py) subtracted; ``pg_ranks``: each group's ranks (empty: all)."""
    rows = _times(entries, base_ns(entries), offset_us)
    g = rows.groupby(KEY, sort=True, observed=True)
    shortest = g["duration_us"].transform("min")
    rows["peer_wait_us"] = rows["duration_us"] - shortest
    rows["behind_us"] = rows["issue_us"] - g["issue_us"].transform("min")
    agg = g.agg(
        op=("op", "first"), phase=("phase", "first"), framework=("framework", "first"),
        input_bytes=("input_bytes", "max"), num_ranks=("rank", "size"),
        first_issue_us=("issue_us", "min"), start_us=("start_us", "min"),
        end_us=("end_us", "max"), duration_us=("duration_us", "median"),
    )  # fmt: skip
    agg["peer_wait_us"] = g["peer_wait_us"].sum(min_count=1)
    agg = agg.join(_lags(rows))
    multi = agg["num_ranks"] >= 2
    agg["lag_us"] = agg["lag_us"].where(multi)
    agg["last_rank"] = agg["last_rank"].where(multi).astype("Int64")
    agg["mismatch"] = _mismatch(rows).reindex(agg.index)
    all_ranks = tuple(sorted(int(r) for r in rows["rank"].unique()))
    agg = _absent(rows, agg, pg_ranks, all_ranks)
    for c in ("op", "phase", "framework"):
        agg[c] = agg[c].astype(object)
    coll = agg.reset_index()[COLLECTIVE_COLUMNS]
    per_rank = rows[RANK_COLUMNS].assign(state=rows["state"].astype(str)).reset_index(drop=True)
    return coll, per_rank
