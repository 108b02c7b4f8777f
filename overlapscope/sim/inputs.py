"""What the what-if calibration takes from a loaded run besides its analysis
(:class:`SimInputs`, read once by :func:`sim_inputs`; the dashboard caches it with the
analysis): ``run.json``, the issue lane's ranges, the memory curve per compute window and,
on GPU runs, the GPU activities and the host's rows on the analysis' clocks."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from overlapscope.analysis.clocks.alignment import align_run
from overlapscope.manifest import RunManifest
from overlapscope.sim.gpu_calibrate import gpu_rows, host_rows
from overlapscope.sim.memory import WindowKey, window_peaks
from overlapscope.trace.run.loader import RunTraces


@dataclass(frozen=True, slots=True)
class SimInputs:
    """What calibration needs beyond the analysis, taken from the loaded run once."""

    manifest: RunManifest | None  # run.json of an overlapscope run; None for torch traces
    issue: pd.DataFrame  # the issue lane's counted rows: rank, step, phase, ts_us, end_us, dur_us
    mem_windows: dict[int, dict[WindowKey, int]]  # per rank (CPU runs with memory events)
    source: str  # the run directory
    # GPU runs: the GPU activities with their launch time, and the host's rows
    # (sim/gpu_calibrate.py); None on CPU runs
    gpu: pd.DataFrame | None = None
    host: pd.DataFrame | None = None


def sim_inputs(traces: RunTraces) -> SimInputs:
    """The :class:`SimInputs` of a loaded run."""
    ev = traces.events
    issue = ev.loc[(ev["lane"] == "issue") & (ev["step"] >= 0), ["rank", "step", "phase", "ts_us", "end_us", "dur_us"]]  # fmt: skip
    windows: dict[int, dict[WindowKey, int]] = {}
    if not traces.has_gpu and traces.manifest is not None:  # (the engine's ranges only)
        memory = dict(tuple(traces.memory.groupby("rank")))
        for rank, rows in ev.groupby("rank", observed=True):
            if w := window_peaks(rows, memory.get(rank, traces.memory.iloc[:0])):
                windows[int(rank)] = w
    src = str(traces.sources[0].parent) if traces.sources else ""
    if not traces.has_gpu:
        return SimInputs(traces.manifest, issue.reset_index(drop=True), windows, src)
    aligned = align_run(traces)[0].events  # on the analysis' clocks, as its tables are
    return SimInputs(
        traces.manifest, issue.reset_index(drop=True), windows, src,
        gpu_rows(aligned), host_rows(aligned),
    )  # fmt: skip
