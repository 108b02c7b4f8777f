"""The tables of where each rank's GPU waited, from each GPU rank's own rows: its idle gaps
by cause (idle.py), the same per stream beside HTA's breakdown, and the stretches with no
compute, communication or wait that the critical path runs through (host_path.py).

One function, :func:`wait_tables`, for the local analysis and the ``--dask`` reduce task
(which runs it on a one-rank run): the same tables either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from overlapscope.analysis.host_path import empty_host_gaps, rank_host_gaps
from overlapscope.analysis.idle import (
    empty_gaps,
    empty_streams,
    gpu_op_counts,
    idle_by_cause,
    join,
    rank_gaps,
    stream_idle,
)
from overlapscope.analysis.metrics import RankSets, by_rank, counted_rows
from overlapscope.trace.loader import RunTraces
from overlapscope.trace.recognize import ComputeSource


@dataclass(frozen=True, slots=True)
class WaitTables:
    """``steps``: the steps table with its idle split by cause and ``num_gpu_ops``;
    ``gaps``, ``streams``, ``host_gaps``: every GPU rank's, one after the other."""

    steps: pd.DataFrame
    gaps: pd.DataFrame
    streams: pd.DataFrame
    host_gaps: pd.DataFrame


def wait_tables(
    run: RunTraces, counted: pd.Series, steps: pd.DataFrame, sets: RankSets
) -> WaitTables:
    """The wait tables of every rank of the run (``steps``: its steps table; ``sets``: its
    lane sets)."""
    ev = counted_rows(run, counted)
    groups = dict(by_rank(ev, sort=False))
    gpu = [i.rank for i in run.ranks if i.compute_source is ComputeSource.GPU_KERNELS]
    parts: dict[str, list[pd.DataFrame]] = {"gaps": [], "streams": [], "host": []}
    for rank in gpu:
        rows = groups.get(rank, ev.iloc[:0])
        windows = steps[steps["rank"] == rank]
        parts["gaps"].append(rank_gaps(rows, rank, windows, sets[rank]))
        parts["streams"].append(stream_idle(rows, rank))
        parts["host"].append(rank_host_gaps(rows, rank, sets[rank]))
    gaps = join(parts["gaps"], empty_gaps())
    steps = idle_by_cause(steps, gaps, gpu)
    return WaitTables(
        steps=steps.assign(num_gpu_ops=gpu_op_counts(ev, steps)),
        gaps=gaps,
        streams=join(parts["streams"], empty_streams()),
        host_gaps=join(parts["host"], empty_host_gaps()),
    )
