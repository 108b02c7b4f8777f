"""Peak memory under another schedule: the measured memory curve, re-stacked.

A step's compute ops are the same in every configuration (forward of each unit, backward of
each unit, the root's pieces, the optimizer); what a policy changes is how many units' full
parameters are alive around each of them. So the measured run is cut into *windows*, one
per compute op: from its start to the next compute op's start (the issues and waits that
follow it included). For each window the calibration keeps the highest ``Total Allocated``
of the profiler's ``[memory]`` events (CPU runs), over every profiled step. The symbolic
engine gives, per window, the most full units alive (gathered or in flight) under the
measured and under the predicted schedule. Then per rank::

    rest_w    = measured_w - alive_measured_w × unit_bytes      (activations, grads, ...)
    predicted = measured peak + max_w(rest_w + alive_predicted_w × unit_bytes)
                              - max_w(measured_w)

so the peak moves to whichever window is highest under the new schedule. (A run whose
peak sits late in backward, when most activations are freed, gains less than a unit from
one more prefetched unit; the single-window model added a whole one.)

:func:`window_peaks` reads the loader's tables (one read of each trace, with its checks): the
step and ``ovs/`` compute rows of a rank and its ``[memory]`` totals
(:attr:`~overlapscope.trace.run.loader.RunTraces.memory`).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from overlapscope.phases import Lane, Phase

WindowKey = tuple[Phase, str, int]  # a compute op: (phase, unit, piece)
_COMPUTE = re.compile(r"^ovs/(fwd|bwd|optim)/([^/]+)$")


def window_peaks(events: pd.DataFrame, memory: pd.DataFrame) -> dict[WindowKey, int]:
    """Highest ``Total Allocated`` per compute window, over every profiled step of one rank:
    ``events`` its rows of the loaded event table, ``memory`` its rows of the memory table;
    empty if the rank has no CPU memory events or no ``ovs/`` compute ranges."""
    if memory.empty:
        return {}
    step_rows = events[events["lane"] == Lane.STEP.value]
    steps = sorted(zip(step_rows["ts_us"].tolist(), step_rows["end_us"].tolist(), strict=True))
    names = events["name"].astype(str)
    found = names.str.extract(_COMPUTE)
    is_op = found[0].notna().to_numpy()
    compute = sorted(
        zip(
            events["ts_us"].to_numpy()[is_op].tolist(),
            found[0][is_op],
            found[1][is_op],
            strict=True,
        )
    )
    if not steps or not compute:
        return {}
    order = np.argsort(memory["ts_us"].to_numpy(), kind="stable")
    times = memory["ts_us"].to_numpy()[order].tolist()
    totals = memory["bytes"].to_numpy()[order].tolist()
    peaks: dict[WindowKey, int] = {}
    for s0, s1 in steps:
        ops = [(ts, ph, u) for ts, ph, u in compute if s0 <= ts < s1]
        seen: dict[tuple[str, str], int] = {}
        for i, (ts, ph, u) in enumerate(ops):
            piece = seen.get((ph, u), 0)
            seen[(ph, u)] = piece + 1
            end = ops[i + 1][0] if i + 1 < len(ops) else s1
            inside = totals[bisect_left(times, ts) : bisect_left(times, end)]
            if inside:
                key = (Phase(ph), u, piece)
                peaks[key] = max(peaks.get(key, 0), max(inside))
    return peaks


def predicted_peak(
    measured_peak: int,
    window_bytes: Mapping[WindowKey, int],
    measured_units: Sequence[tuple[WindowKey, int]],
    predicted_units: Sequence[tuple[WindowKey, int]],
    unit_bytes: int,
) -> int | None:
    """One rank's predicted peak (see the module docstring), or None where the windows do
    not match the programs (then the caller falls back to the single-window model)."""
    before, after = dict(measured_units), dict(predicted_units)
    keys = [k for k in window_bytes if k in before and k in after]
    if not keys or len(keys) < len(after) // 2:
        return None
    rest = {k: window_bytes[k] - before[k] * unit_bytes for k in keys}
    high_before = max(window_bytes[k] for k in keys)
    high_after = max(rest[k] + after[k] * unit_bytes for k in keys)
    return measured_peak + high_after - high_before
