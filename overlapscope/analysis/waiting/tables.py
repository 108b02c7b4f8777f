"""The tables of where each rank's GPU waited, from each rank's own rows: its idle gaps by
cause (idle.py), the same per stream beside HTA's breakdown, the stretches with no compute,
communication or wait that the critical path runs through (host_path.py), and what each
collective's exposed time needs of the rank (comm_causes.py: issued late or not, the
stretches of it no compute covers).

One function, :func:`wait_tables`, for the local analysis and the ``--dask`` reduce task
(which runs it on a one-rank run): the same tables either way. Each rank's launches and
host calls are read once (host.RankHost) for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.analysis.host.calls import RankHost
from overlapscope.analysis.timeline.metrics import RankSets, by_rank, counted_rows
from overlapscope.analysis.waiting.comm_causes import empty_pieces, rank_facts
from overlapscope.analysis.waiting.host_path import empty_host_gaps, rank_host_gaps
from overlapscope.analysis.waiting.idle import (
    CAUSES,
    empty_gaps,
    empty_host_ops,
    empty_streams,
    gpu_op_counts,
    idle_by_cause,
    join,
    rank_gaps,
    stream_idle,
)
from overlapscope.arrays import BoolArray
from overlapscope.trace.recognize.table import ComputeSource
from overlapscope.trace.run.loader import RunTraces


@dataclass(frozen=True, slots=True)
class WaitTables:
    """``steps``: the steps table with its idle split by cause and ``num_gpu_ops``;
    ``gaps``, ``streams``, ``host_gaps``, ``host_ops``: every GPU rank's, one after the
    other (``host_ops``: idle.host_ops of its gaps, small whatever the trace); ``late``:
    per collective of ``exposure`` (its order), and ``pieces``, every rank's,
    comm_causes.rank_facts."""

    steps: pd.DataFrame
    gaps: pd.DataFrame
    streams: pd.DataFrame
    host_gaps: pd.DataFrame
    host_ops: pd.DataFrame
    late: BoolArray
    pieces: pd.DataFrame


def wait_tables(
    run: RunTraces,
    counted: pd.Series,
    steps: pd.DataFrame,
    sets: RankSets,
    exposure: pd.Series,
    with_gaps: bool = True,
) -> WaitTables:
    """The wait tables of every rank of the run (``steps``: its steps table; ``sets``: its
    lane sets; ``exposure``: its collectives' exposed time, metrics.comm_exposure;
    ``with_gaps``: with the table of every gap, else empty, as large as the rank's kernels:
    the ``--dask`` reduce task makes it only when the timeline is asked for)."""
    ev = counted_rows(run, counted)
    groups = dict(by_rank(ev, sort=False))
    gpu = {i.rank for i in run.ranks if i.compute_source is ComputeSource.GPU_KERNELS}
    parts: dict[str, list[pd.DataFrame | None]] = {
        n: [] for n in ("gaps", "streams", "host", "ops")
    }
    sums = np.zeros((len(CAUSES), len(steps)))
    step_rank = steps["rank"].to_numpy()
    comm_rank = ev["rank"].to_numpy()[ev.index.get_indexer(exposure.index)]
    late = np.zeros(len(comm_rank), dtype=bool)
    pieces: list[pd.DataFrame | None] = []
    for info in run.ranks:  # (in rank order: the order of the rows)
        rank = info.rank
        rows = groups.get(rank, ev.iloc[:0])
        host = RankHost.of(rows) if rank in gpu else None
        if host is not None:
            at = np.flatnonzero(step_rank == rank)
            windows = steps.iloc[at]
            gaps, sums[:, at], ops = rank_gaps(rows, rank, windows, sets[rank], host, with_gaps)
            parts["gaps"].append(gaps)
            parts["ops"].append(ops)
            parts["streams"].append(stream_idle(rows, rank, host))
            parts["host"].append(rank_host_gaps(rows, rank, sets[rank], host))
        mine = np.flatnonzero(comm_rank == rank)
        if len(mine):
            at = rows.index.get_indexer(exposure.index[mine])
            launched = host.launched if host is not None else None
            late[mine], stretches = rank_facts(rank, rows, at, sets[rank].compute, launched)
            pieces.append(stretches)
    gpu_steps = np.isin(step_rank, sorted(gpu))
    return WaitTables(
        steps=idle_by_cause(steps, sums, gpu_steps, gpu_op_counts(ev, steps)),
        gaps=join(parts["gaps"], empty_gaps),
        streams=join(parts["streams"], empty_streams),
        host_gaps=join(parts["host"], empty_host_gaps),
        host_ops=join(parts["ops"], empty_host_ops),
        late=late,
        pieces=join(pieces, empty_pieces),
    )
