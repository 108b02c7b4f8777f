"""The step boundary of one rank: the time around a step's first GPU op that no step figure
holds (the step span the figures use begins at the step's first GPU op).

Per counted step (:data:`BOUNDARY_COLUMNS`): ``profiler_start_us``, its ``ProfilerStep``
range's start on the CPU; ``first_gpu_us``, its first GPU op's start; ``lead_us``, the time
between them; ``gap_before_us``, the GPU's idle from the previous counted step's last GPU op
to this one's first (NaN for the first counted step); ``idle_us``, the boundary's GPU idle:
``gap_before_us`` where known, else ``lead_us``. ``host_range``: the innermost CPU range of the
step's thread that covers most of the lead (None: no one range does), with its
``host_activity`` (analysis/host/calls.py) and ``host_covered_us``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from overlapscope.analysis.host.calls import activity_of
from overlapscope.phases import Lane

BOUNDARY_COLUMNS = [
    *("rank", "step", "profiler_start_us", "first_gpu_us", "lead_us", "gap_before_us"),
    *("idle_us", "host_range", "host_activity", "host_covered_us"),
]
# The CPU rows that do not name what the host did (the step's own range, runtime calls).
_NOT_NAMES = ("ProfilerStep#", "cuda", "hip")


def _named(cpu: pd.DataFrame, lo: float, hi: float) -> tuple[str | None, float]:
    """The innermost CPU range covering most of ``[lo, hi)`` and how much of it it covers."""
    if hi <= lo or cpu.empty:
        return None, 0.0
    over = np.minimum(cpu["end_us"].to_numpy(), hi) - np.maximum(cpu["ts_us"].to_numpy(), lo)
    most = over >= 0.5 * (hi - lo)
    if not most.any():
        return None, 0.0
    pick = np.flatnonzero(most)[np.argmin(cpu["dur_us"].to_numpy()[most])]
    return str(cpu["name"].iloc[pick]), float(over[pick])


def rank_boundaries(rows: pd.DataFrame, rank: int) -> pd.DataFrame:
    """Every counted step's boundary of one rank's counted ``rows`` (BOUNDARY_COLUMNS)."""
    marks = rows[(rows["lane"] == Lane.STEP.value).to_numpy() & ~rows["on_gpu"].to_numpy()]
    gpu = rows[rows["on_gpu"].to_numpy() & (rows["step"].to_numpy() >= 0)]
    if marks.empty or gpu.empty:
        return pd.DataFrame(columns=BOUNDARY_COLUMNS)
    spans = gpu.groupby("step").agg(first=("ts_us", "min"), last=("end_us", "max"))
    names = rows["name"].astype(str)
    cpu_rows = rows[~rows["on_gpu"].to_numpy() & ~names.str.startswith(_NOT_NAMES).to_numpy()]
    out = []
    previous_last = np.nan
    for mark in marks.sort_values("ts_us").itertuples(index=False):
        if mark.step not in spans.index:
            continue
        first, last = float(spans.loc[mark.step, "first"]), float(spans.loc[mark.step, "last"])
        lead = max(first - float(mark.ts_us), 0.0)
        gap = first - previous_last if np.isfinite(previous_last) else np.nan
        cpu = cpu_rows[cpu_rows["tid"].to_numpy() == mark.tid]
        name, covered = _named(cpu, float(mark.ts_us), first)
        idle = max(gap, 0.0) if np.isfinite(gap) else lead
        activity = activity_of(name).value if name else None
        out.append(
            (
                rank,
                int(mark.step),
                float(mark.ts_us),
                first,
                lead,
                gap,
                idle,
                name,
                activity,
                covered,
            )
        )
        previous_last = last
    return pd.DataFrame(out, columns=BOUNDARY_COLUMNS)
