"""Why exposed communication is exposed: each collective's exposed time split in three.

A collective on a rank is exposed where no compute runs beside it. That time has one of
three causes, which call for different changes::

    rank 0  ...compute][ wait for rank 1 ][ transfer ]      (its launch on time)
    rank 1  ...compute]        idle ...   [ transfer ]      (launched after its GPU ran dry)

* ``host_late`` (issued late by the host): its launch on the CPU came after the GPU had run
  out of work (every compute op launched before it had finished): the compute that could
  have hidden it was over before the host issued it. No prefetch or faster link helps; a
  faster host does (host/calls.py, idle.py say what it was doing).
* ``peer_wait`` (waiting for the last rank): the exposed part of its first
  ``dur - transfer`` µs, where ``transfer`` is the fastest rank's duration (the rank waits
  for the last one to arrive before data moves; collectives.py).
* ``transfer`` (transfer longer than the compute meant to hide it): the rest of a collective
  issued on time. Prefetching earlier or a faster link help only here.

The three add up to the collective's exposed time on that rank. Per rank, what each GPU
collective needs of the rank's own rows (its launch was late or not; the stretches of it
no compute covers) is :func:`rank_facts`; the split, which needs the other ranks'
durations, is :func:`split_exposure`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from overlapscope.analysis.fields import PER_STEP, TOTAL
from overlapscope.analysis.host.calls import Launches
from overlapscope.analysis.intervals import Intervals, free_within
from overlapscope.analysis.segments import column_in
from overlapscope.analysis.waiting.idle import frame
from overlapscope.arrays import BoolArray, FloatArray, IntArray
from overlapscope.phases import Lane

PARTS = ("host_late", "peer_wait", "transfer")
PART_COLUMNS = tuple(f"exposed_{p}_us" for p in PARTS)
PIECE_COLUMNS = ["rank", "row", "start_us", "end_us"]
KEY = ["group", "step", "seq"]


def out_of_work(rows: pd.DataFrame, launched: Launches, at: FloatArray) -> BoolArray:
    """Per time ``at`` (a launch on the CPU): had the GPU run out of compute work, every
    compute op launched before it finished by then? (No compute launched before: yes.)
    ``rows``: one rank's rows; ``launched``: their launches."""
    compute = np.flatnonzero(
        rows["on_gpu"].to_numpy() & column_in(rows["lane"], [Lane.COMPUTE.value])
    )
    known = compute[np.isfinite(launched.at[compute])]
    order = known[np.argsort(launched.at[known], kind="stable")]
    if not len(order):
        return np.isfinite(at)
    reach = np.maximum.accumulate(rows["end_us"].to_numpy()[order])
    before = np.searchsorted(launched.at[order], at, side="left") - 1
    last_end = np.where(before >= 0, reach[np.maximum(before, 0)], -np.inf)
    return np.isfinite(at) & (last_end <= at)


def pieces(rank: int, compute: Intervals, start: FloatArray, end: FloatArray) -> pd.DataFrame:
    """The stretches of each ``[start, end)`` (a collective of ``rank``) no compute covers:
    one row per stretch (``row``: the collective's position among the rank's), in order."""
    row, a, b = free_within(compute, start, end)
    ranks = np.full(len(row), rank, dtype=np.int64)
    return frame({"rank": ranks, "row": row, "start_us": a, "end_us": b})


def empty_pieces() -> pd.DataFrame:
    return pieces(0, Intervals.empty(), np.zeros(0), np.zeros(0))


def rank_facts(
    rank: int,
    rows: pd.DataFrame,
    comm_at: IntArray,
    compute: Intervals,
    launched: Launches | None,
) -> tuple[BoolArray, pd.DataFrame]:
    """Of one rank's collectives (positions ``comm_at`` in its ``rows``; ``compute``: its
    compute as an interval set; ``launched``: the rows' launches, None on a CPU rank): was
    each issued late by the host, and the stretches of each no compute covers (:func:`pieces`, ``row``: its
    position among ``comm_at``)."""
    late = np.zeros(len(comm_at), dtype=bool)
    gpu = rows["on_gpu"].to_numpy()[comm_at]
    if launched is not None and gpu.any():
        late[gpu] = out_of_work(rows, launched, launched.at[comm_at[gpu]])
    ts, end = rows["ts_us"].to_numpy()[comm_at], rows["end_us"].to_numpy()[comm_at]
    return late, pieces(rank, compute, ts, end)


def split_exposure(comm: pd.DataFrame, stretches: pd.DataFrame) -> pd.DataFrame:
    """``comm`` (every rank's collectives: ``rank, group, step, seq, ts_us, dur_us,
    exposed_us, late``) with the three parts (PART_COLUMNS) of each one's exposed time.
    ``stretches``: every rank's :func:`pieces` (``row``: a position among the rank's rows of
    ``comm``, whose ranks' rows follow one another)."""
    dur = comm["dur_us"].to_numpy(dtype=np.float64)
    matched = (comm["seq"].to_numpy() >= 0) & comm["group"].notna().to_numpy()
    waited = np.zeros(len(comm))
    if matched.any():
        keyed = comm.loc[matched, KEY].astype(object)
        g = pd.DataFrame({"dur": dur[matched]}).groupby(
            [keyed[c].to_numpy() for c in KEY], sort=False, dropna=False
        )["dur"]
        fastest, num = g.transform("min").to_numpy(), g.transform("size").to_numpy()
        waited[matched] = np.where(num >= 2, dur[matched] - fastest, 0.0)
    ranks, first = np.unique(comm["rank"].to_numpy(np.int64), return_index=True)
    of = np.searchsorted(ranks, stretches["rank"].to_numpy(np.int64))
    row = first[of] + stretches["row"].to_numpy(dtype=np.int64) if len(ranks) else of
    ts = comm["ts_us"].to_numpy(dtype=np.float64)
    head_end = ts[row] + waited[row]
    inside = np.maximum(
        np.minimum(stretches["end_us"].to_numpy(), head_end)
        - np.maximum(stretches["start_us"].to_numpy(), ts[row]),
        0.0,
    )
    exposed = comm["exposed_us"].to_numpy(dtype=np.float64)
    peer = np.minimum(np.bincount(row, weights=inside, minlength=len(comm)), exposed)
    rest = np.maximum(exposed - peer, 0.0)
    late = comm["late"].to_numpy(dtype=bool)
    return comm.assign(
        exposed_host_late_us=np.where(late, rest, 0.0),
        exposed_peer_wait_us=peer,
        exposed_transfer_us=np.where(late, 0.0, rest),
    )


def _scaled(comm: pd.DataFrame, ranks: pd.DataFrame) -> FloatArray:
    """Each collective's parts (collective x part), scaled per rank as the units table
    shares a rank's exposed time (its ``exposed_comm_total_us`` over the sum of its
    collectives' own exposed time), so the parts add up to the tables' exposed time."""
    rank = comm["rank"].to_numpy(np.int64)
    table_ranks = ranks["rank"].to_numpy(np.int64)
    at = np.minimum(np.searchsorted(table_ranks, rank), max(len(table_ranks) - 1, 0))
    known = (table_ranks[at] == rank) if len(table_ranks) else np.zeros(len(rank), dtype=bool)
    own = np.bincount(at[known], weights=comm["exposed_us"].to_numpy()[known], minlength=len(ranks))
    target = ranks["exposed_comm_total_us"].to_numpy(np.float64)
    scale = np.where(own > 0, target / np.where(own > 0, own, 1.0), 0.0)
    factor = np.where(known, scale[at] if len(scale) else 0.0, 0.0)
    parts = np.stack([comm[c].to_numpy(np.float64) for c in PART_COLUMNS], axis=1)
    return parts * factor[:, None]


def _key(frame: pd.DataFrame, keys: list[str]) -> pd.MultiIndex:
    """The rows' key tuples, a missing label as one value of its own."""
    return pd.MultiIndex.from_arrays(
        [frame[k].astype(object).where(frame[k].notna(), "\0").to_numpy() for k in keys]
    )


def unit_parts(units: pd.DataFrame, comm: pd.DataFrame, ranks: pd.DataFrame) -> pd.DataFrame:
    """The units table with each part's total and mean per step
    (``exposed_<part>_total_us``, ``..._per_step_us``); ``comm``: :func:`split_exposure`'s."""
    keys = ["rank", "unit", "phase", "kind"]
    at = _key(units, keys).get_indexer(_key(comm, keys))  # each collective's unit row
    scaled = _scaled(comm, ranks)
    ok = at >= 0
    steps = units["rank"].map(ranks.set_index("rank")["num_steps"]).clip(lower=1).to_numpy()
    columns: dict[str, FloatArray] = {}
    for i, p in enumerate(PARTS):
        total = np.bincount(at[ok], weights=scaled[ok, i], minlength=len(units)).astype(float)
        columns[f"exposed_{p}{TOTAL}"] = total
        columns[f"exposed_{p}{PER_STEP}"] = total / steps
    return pd.concat([units, pd.DataFrame(columns, index=units.index)], axis=1)


def rank_parts(ranks: pd.DataFrame, comm: pd.DataFrame) -> pd.DataFrame:
    """The ranks table with each part of its exposed communication, total and per step
    (``exposed_comm_<part>_total_us``, ``..._per_step_us``): they add up to
    ``exposed_comm_total_us``."""
    rank, table_ranks = comm["rank"].to_numpy(np.int64), ranks["rank"].to_numpy(np.int64)
    at = np.searchsorted(table_ranks, rank)
    scaled = _scaled(comm, ranks)
    n = ranks["num_steps"].to_numpy(dtype=np.float64)
    columns: dict[str, FloatArray] = {}
    for i, p in enumerate(PARTS):
        summed = np.bincount(at, weights=scaled[:, i], minlength=len(ranks))
        total = summed[: len(ranks)].astype(np.float64)
        columns[f"exposed_comm_{p}{TOTAL}"] = total
        columns[f"exposed_comm_{p}{PER_STEP}"] = np.where(n > 0, total / np.maximum(n, 1), np.nan)
    return pd.concat([ranks, pd.DataFrame(columns, index=ranks.index)], axis=1)
