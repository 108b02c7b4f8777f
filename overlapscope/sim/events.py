"""A predicted run as the event table the analysis reads, so the analysis computes its figures.

:func:`replay_run` turns replayed steps into a :class:`~overlapscope.trace.run.loader.RunTraces`
(schema: ``overlapscope/trace/schema.py``): per rank, one ``step`` row per replayed step and
the replay's compute, issue, wait and comm intervals with their phase, unit, collective kind,
bytes and queue position; a GPU replay's activities as GPU rows on their streams (the analysis
then reads the device, as it does a measured GPU run). Steps follow each other as in :mod:`overlapscope.sim.export`: each
starts on every rank when the slowest rank has finished the previous one. Predicted step
time, exposed communication and NCCL wait are then the analysis' own
(:func:`overlapscope.analysis.timeline.metrics.step_table`); nothing in the simulator re-derives
them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from overlapscope.analysis.timeline.metrics import counted_mask, step_table
from overlapscope.phases import KIND_CATEGORIES, LANE_CATEGORIES
from overlapscope.sim.replay import Replay
from overlapscope.trace.producers.ours import Ours
from overlapscope.trace.recognize.table import ComputeSource
from overlapscope.trace.run.loader import RankInfo, RunTraces
from overlapscope.trace.schema import EVENT_COLUMNS

GROUP = "predicted"
COMM_TID, MAIN_TID = 2, 1


def _rows(replays: Sequence[Replay]) -> pd.DataFrame:
    records: list[tuple[object, ...]] = []
    offset = 0.0
    first = replays[0].origin_us if replays else None
    for step, rep in enumerate(replays):
        colls = rep.program.collectives
        if rep.origin_us is not None and first is not None:  # GPU: steps back to back
            offset = rep.origin_us - first
        starts = rep.step_start_us or {}
        for r, end in rep.step_time_us.items():
            at = offset + starts.get(r, 0.0)
            records.append((r, step, MAIN_TID, -1, "step", None, None, None, -1, -1, at, at + end))
        for iv in rep.intervals:
            c = colls[iv.collective] if iv.collective >= 0 else None
            kind = c.kind if c is not None and iv.lane == "comm" else None
            nbytes = c.bytes if c is not None and iv.lane == "comm" else -1
            seq = iv.collective if iv.lane == "comm" else -1
            tid = iv.stream if iv.stream >= 0 else COMM_TID if iv.lane == "comm" else MAIN_TID
            phase = iv.phase.value if iv.phase is not None else None
            records.append(
                (iv.rank, step, tid, iv.stream, iv.lane, phase, iv.unit, kind, nbytes, seq,
                 offset + iv.start_us, offset + iv.end_us)
            )  # fmt: skip
        offset += max(rep.step_time_us.values())
    return pd.DataFrame.from_records(
        records,
        columns=["rank", "step", "tid", "stream", "lane", "phase", "unit", "kind", "bytes", "seq", "ts_us", "end_us"],
    )  # fmt: skip


def replay_events(replays: Sequence[Replay]) -> pd.DataFrame:
    """The replayed steps as an event table (every schema column, schema dtypes); step k of
    the table is ``replays[k]``, collectives keyed by ``seq`` (their index in the program)."""
    df = _rows(replays)
    df["dur_us"] = df["end_us"] - df["ts_us"]
    df["seq"] = df["seq"] + df["step"] * (
        1 + max((len(r.program.collectives) for r in replays), default=0)
    )
    df.loc[df["lane"] != "comm", "seq"] = -1
    df["on_gpu"] = df["stream"] >= 0
    df["cat"] = "user_annotation"
    df.loc[df["on_gpu"], "cat"] = "kernel"
    df["name"] = df["phase"].fillna("ProfilerStep") + "/" + df["unit"].fillna("")
    df.loc[df["on_gpu"], "name"] = "kernel/" + df["unit"].fillna("")
    df["group"] = df["lane"].where(df["lane"] != "comm", GROUP).where(df["lane"] == "comm")
    df["correlation"] = -1
    df["lane"] = pd.Categorical(df["lane"], categories=LANE_CATEGORIES)
    df["kind"] = pd.Categorical(df["kind"], categories=KIND_CATEGORIES)
    for col, dtype in EVENT_COLUMNS.items():
        if col not in ("lane", "kind"):
            df[col] = df[col].astype(dtype)
    return df[list(EVENT_COLUMNS)].sort_values(["rank", "ts_us"], ignore_index=True)


def replay_run(replays: Sequence[Replay], world_size: int, backend: str = "gloo") -> RunTraces:
    """The replayed steps as a loaded run the analysis functions take."""
    events = replay_events(replays)
    steps = tuple(range(len(replays)))
    gpu = any(rep.origin_us is not None for rep in replays)
    ranks = tuple(
        RankInfo(
            rank=int(r),
            path=Path(f"predicted-rank-{r}"),
            world_size=world_size,
            backend=backend,
            framework=Ours.name,
            compute_source=ComputeSource.GPU_KERNELS if gpu else ComputeSource.OVS_RANGES,
            steps=steps,
            num_events=int((events["rank"] == r).sum()),
            has_gpu=gpu,
            base_time_ns=None,
        )
        for r in sorted(events["rank"].unique())
    )
    return RunTraces(events, ranks, world_size, None, False, (), ())


def replay_metrics(replays: Sequence[Replay], world_size: int) -> pd.DataFrame:
    """Per (rank, step): the analysis' ``step_table`` of the replayed steps."""
    run = replay_run(replays, world_size)
    return step_table(run, counted_mask(run))
