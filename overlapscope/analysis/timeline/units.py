"""The units tables: per (rank, unit, phase, kind) of collectives, their count, time, exposed
time, wait time and bytes (:func:`unit_table`); per (rank, unit), the compute time
(:func:`compute_by_unit`).

Built from integer group ids and numpy arrays, with one pandas ``groupby(...).sum()`` per
set of sums: pandas sums a group's floats with compensated (Kahan) summation in row order,
which numpy's pairwise sums do not reproduce bit for bit, so the sums stay pandas' own; the
rest (which rows, which keys, in which order) is array work. A table of a few rows cost
~10 ms of pandas calls per rank before (a groupby by four categorical keys, a merge, maps),
which a ``--dask`` reduce task pays once per rank.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from overlapscope.analysis.intervals import subtract, union
from overlapscope.analysis.timeline.metrics import counted_rows, distinct_ranks
from overlapscope.phases import Lane, Phase
from overlapscope.trace.recognize.table import ComputeSource
from overlapscope.trace.run.loader import RunTraces

UNIT_COLUMNS = [
    "rank",
    "unit",
    "phase",
    "kind",
    "num_ops",
    "comm_total_us",
    "comm_per_step_us",
    "exposed_total_us",
    "exposed_per_step_us",
    "wait_total_us",
    "wait_per_step_us",
    "bytes_total",
]
KEYS = ("unit", "phase", "kind")
_AWAITED = {p.value: (p.awaited.value if p.awaited is not None else None) for p in Phase}


def _labels(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(codes, values) of a label column: each row's code in category order, missing last
    (``groupby(sort=True, dropna=False)``'s order of a categorical key), and the value of
    each code as the table gives it (a str, None for missing)."""
    cat = column if isinstance(column.dtype, pd.CategoricalDtype) else column.astype("category")
    codes = cat.cat.codes.to_numpy().astype(np.int64)
    values = np.empty(len(cat.cat.categories) + 1, dtype=object)
    values[:-1] = cat.cat.categories.to_numpy(dtype=object)
    values[-1] = None
    return np.where(codes >= 0, codes, len(values) - 1), values


def _per_rank(ranks: pd.DataFrame, column: str, rank: np.ndarray) -> np.ndarray:
    """``rank``'s values of ``column`` in the ranks table (``Series.map``: NaN if absent)."""
    at = pd.Index(ranks["rank"].to_numpy()).get_indexer(rank)
    values = ranks[column].to_numpy(dtype=np.float64)
    return np.where(at >= 0, values[np.maximum(at, 0)] if len(values) else np.nan, np.nan)


def _group_ids(keys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each group, each row's group) of the rows' key tuples, the groups in
    the keys' lexicographic order."""
    if not len(keys[0]):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    stacked = np.stack(keys, axis=1)
    _, first, ids = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    return first, ids.reshape(-1)


def _sums(ids: np.ndarray, columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """Per group id (in order), each column's sum as ``groupby(...).sum()`` makes it."""
    return pd.DataFrame(columns).groupby(ids, sort=True).sum()


def _waits(ev: pd.DataFrame) -> dict[tuple[int, str, str], float]:
    """``(rank, unit, phase awaited) -> wait_total_us``: the ``ovs/<phase>.wait/<unit>``
    ranges by the phase they wait on (ranges without a unit or an awaited phase left out).
    The labels of the wait rows only are read (most rows of a GPU trace are not waits)."""
    waits = np.flatnonzero((ev["lane"] == Lane.WAIT.value).to_numpy())
    if not len(waits):
        return {}
    phase, phases = _labels(ev["phase"].iloc[waits])
    awaited = np.asarray([_AWAITED.get(v) if v is not None else None for v in phases], object)
    unit, units = _labels(ev["unit"].iloc[waits])
    # per category first, then per row by code
    awaits = np.asarray([a is not None for a in awaited], dtype=bool)
    rows = np.flatnonzero(awaits[phase] & (unit < len(units) - 1))
    if not len(rows):
        return {}
    rank = ev["rank"].to_numpy()[waits[rows]]
    what = awaited[phase[rows]]
    _, what_code = np.unique(what.astype(str), return_inverse=True)
    first, ids = _group_ids([rank.astype(np.int64), unit[rows], what_code.reshape(-1)])
    total = _sums(ids, {"dur_us": ev["dur_us"].to_numpy()[waits[rows]]})["dur_us"].to_numpy()
    return {
        (int(rank[f]), str(units[unit[rows][f]]), str(what[f])): float(t)
        for f, t in zip(first.tolist(), total.tolist(), strict=True)
    }


def _wait_totals(
    waits: dict[tuple[int, str, str], float], rank: np.ndarray, unit: np.ndarray, phase: np.ndarray
) -> np.ndarray:
    """Each row's wait total (0 where it waits on nothing, or has no unit or phase)."""
    return np.asarray(
        [
            waits.get((int(r), u, p), 0.0) if u is not None and p is not None else 0.0
            for r, u, p in zip(rank.tolist(), unit, phase, strict=True)
        ],
        dtype=np.float64,
    )


def unit_table(
    run: RunTraces, counted: pd.Series, exposure: pd.Series, ranks: pd.DataFrame
) -> pd.DataFrame:
    """Per (rank, unit, phase, kind) of collectives: ``num_ops``, communication, exposed and
    wait time (totals and per-step means), ``bytes_total`` (null when any op's size is
    unknown). Where collectives overlap one another, the rank's exposed time is shared among
    them in proportion to each one's own exposed time, so the rows of a rank add up to its
    ``exposed_comm_total_us``."""
    ev = counted_rows(run, counted)
    comm = ev.loc[exposure.index, ["rank", *KEYS, "dur_us", "bytes"]]
    rank = comm["rank"].to_numpy()
    own = exposure.to_numpy()
    own_sum = pd.Series(own).groupby(rank).transform("sum").to_numpy()
    target = _per_rank(ranks, "exposed_comm_total_us", rank)
    scale = np.where(own_sum > 0, target / np.where(own_sum > 0, own_sum, 1.0), 0.0)
    nbytes = comm["bytes"].to_numpy()
    labels = {c: _labels(comm[c]) for c in KEYS}
    first, ids = _group_ids([rank.astype(np.int64), *(labels[c][0] for c in KEYS)])
    sums = _sums(
        ids,
        {
            "dur_us": comm["dur_us"].to_numpy(),
            "exposed_us": own * scale,
            "known_bytes": np.where(nbytes >= 0, nbytes, 0),
        },
    )
    unknown = np.bincount(ids, weights=nbytes < 0, minlength=len(first)) > 0
    keys = {c: labels[c][1][labels[c][0][first]] for c in KEYS}
    table: dict[str, object] = {"rank": rank[first]}
    table |= {c: pd.Series(v, dtype=object) for c, v in keys.items()}  # (not inferred as str)
    totals = {
        "comm": sums["dur_us"].to_numpy(),
        "exposed": sums["exposed_us"].to_numpy(),
        "wait": _wait_totals(_waits(ev), rank[first], keys["unit"], keys["phase"]),
    }
    per = np.maximum(_per_rank(ranks, "num_steps", rank[first]), 1.0)
    table["num_ops"] = np.bincount(ids, minlength=len(first)).astype(np.int64)
    for f, total in totals.items():
        table[f"{f}_total_us"] = total
        table[f"{f}_per_step_us"] = total / per
    table["bytes_total"] = np.where(unknown, np.nan, sums["known_bytes"].to_numpy(np.float64))
    frame = pd.DataFrame({c: table[c] for c in UNIT_COLUMNS})
    return frame.sort_values(
        ["rank", "exposed_total_us"], ascending=[True, False], ignore_index=True
    )


def compute_by_unit(run: RunTraces, counted: pd.Series) -> pd.DataFrame:
    """``compute_total_us`` per (rank, unit): the length of the union of the unit's compute
    rows (CPU ops nest; a sum would count a parent and its children twice); unit "" for
    compute outside every unit. GPU ranks count only GPU kernels. Ranks in order, each
    with its "" row first, then its units in order of their names."""
    ev = counted_rows(run, counted)
    gpu_ranks = [i.rank for i in run.ranks if i.compute_source is ComputeSource.GPU_KERNELS]
    rank = ev["rank"].to_numpy()
    keep = (ev["lane"] == Lane.COMPUTE.value).to_numpy() & (
        ev["on_gpu"].to_numpy() | ~np.isin(rank, gpu_ranks)
    )
    codes, names = _labels(ev["unit"])
    names[-1] = ""  # no unit: compute outside every unit, as a unit named ""
    in_unit_code = np.asarray([n != "" for n in names], dtype=bool)
    rank, codes = rank[keep], codes[keep]
    s, e = ev["ts_us"].to_numpy()[keep], ev["end_us"].to_numpy()[keep]
    records = []
    for r in distinct_ranks(rank):
        mine = rank == r
        code, rs, re_ = codes[mine], s[mine], e[mine]
        in_unit = in_unit_code[code]
        unit_set = union(rs[in_unit], re_[in_unit])
        # compute outside every unit: what the units' compute leaves of the whole (an op
        # around a unit's hooks may hold some of it)
        rest = subtract(union(rs, re_), unit_set).total
        records.append({"rank": int(r), "unit": "", "compute_total_us": rest})
        code, rs, re_ = code[in_unit], rs[in_unit], re_[in_unit]
        for c in sorted(np.unique(code).tolist(), key=lambda c: str(names[c])):
            sel = code == c
            length = union(rs[sel], re_[sel]).total
            records.append({"rank": int(r), "unit": str(names[c]), "compute_total_us": length})
    return pd.DataFrame.from_records(records, columns=["rank", "unit", "compute_total_us"])
