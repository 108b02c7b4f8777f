"""What one rank's GPU did in each part of a step (forward, backward, optimizer), in the three
measures that tell a slow rank's cause apart: the time of its ops, the time its host took to
launch them, and the idle between them.

Per rank, counted step and part (:data:`PHASE_WORK_COLUMNS`; a GPU op's part is its phase's,
phases.step_part, else ``step``: the step's GPU work of no named part)::

    span_us           from the part's first GPU op (compute or communication) to its last
    work_us           the span less the time in which only communication ran (a rank waiting
                      in a collective for a late peer waits for the peer, not for its own
                      work): its compute and idle
    num_ops           its compute ops (kernels of the compute lane)
    op_us             their summed duration
    idle_us           the span's time with no GPU activity at all
    launch_median_us  the median duration of the CPU calls that launched its compute ops
                      (cudaLaunchKernel...: slower on a host whose cores are contended)

A rank whose part is longer than its peers' with the same ops differs in one of them: op time
(its GPU: clocks, another process), launch calls (its CPU), or idle (its host launched later).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from overlapscope.analysis.intervals import covered, union
from overlapscope.analysis.segments import column_in
from overlapscope.phases import Lane, step_part
from overlapscope.trace.attribution import launch_rows

# The part of a GPU op whose phase is of no part (the trace names no phases: DDP, plain
# collectives; or a copy).
STEP = "step"
PHASE_WORK_COLUMNS = [
    *("rank", "step", "part", "start_us", "span_us", "work_us", "num_ops", "op_us", "idle_us"),
    "launch_median_us",
]


def rank_phase_work(rows: pd.DataFrame, rank: int) -> pd.DataFrame:
    """Every counted step's parts of one rank's counted ``rows`` (PHASE_WORK_COLUMNS)."""
    on_gpu = rows["on_gpu"].to_numpy()
    gpu = on_gpu & (rows["step"].to_numpy() >= 0)
    if not gpu.any():
        return pd.DataFrame(columns=PHASE_WORK_COLUMNS)
    ts, end = rows["ts_us"].to_numpy(), rows["end_us"].to_numpy()
    launch_dur = np.full(len(rows), np.nan)
    at, src = launch_rows(rows["correlation"].to_numpy(), on_gpu)
    launch_dur[at] = rows["dur_us"].to_numpy()[src]
    busy = union(ts[gpu], end[gpu])
    compute = column_in(rows["lane"], [Lane.COMPUTE.value])
    comm = column_in(rows["lane"], [Lane.COMM.value])
    not_comm = union(ts[gpu & ~comm], end[gpu & ~comm])
    work = np.flatnonzero(gpu & (compute | comm))
    phases = pd.Series(rows["phase"].to_numpy()[work], dtype=object)
    named = {p: step_part(p) for p in phases.dropna().unique()}
    parts = phases.map(named).astype(object)
    parts = parts.where(parts.notna(), STEP)
    frame = pd.DataFrame(
        {
            "step": rows["step"].to_numpy()[work],
            "part": parts.to_numpy(),
            "ts": ts[work],
            "end": end[work],
            "compute": compute[work],
            "dur": end[work] - ts[work],
            "launch": launch_dur[work],
        }
    )
    out = []
    for (step, part), g in frame.groupby(["step", "part"], sort=True):
        lo, hi = float(g["ts"].min()), float(g["end"].max())
        mine = g[g["compute"]]
        launches = mine["launch"].dropna()
        q0, q1 = np.array([lo]), np.array([hi])
        idle = (hi - lo) - float(covered(busy, q0, q1)[0])
        own = float(covered(not_comm, q0, q1)[0]) + idle
        out.append(
            (rank, int(step), str(part), lo, hi - lo, own, len(mine), float(mine["dur"].sum()),
             idle, float(launches.median()) if len(launches) else np.nan)
        )  # fmt: skip
    return pd.DataFrame(out, columns=PHASE_WORK_COLUMNS)
