"""Holistic Trace Analysis (HTA) figures beside ours, computed offline.

HTA is optional (``pip install overlapscope[hta]``). It is only run on traces with GPU
kernels: its GPU analyses give NaN or raise on CPU-only traces. Its pitfalls are avoided:
ranks are passed explicitly (``trace_files={rank: path}``; HTA's own rank regex fails on
compact JSON), the last profiler step is kept (``include_last_profiler_step=True``, HTA drops
it by default), and ``HTA_DISABLE_NS_ROUNDING`` is left as the caller has it (HTA rounds float
timestamps to whole µs unless it is set; the difference is reported in ``ns_rounding``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from overlapscope.analysis.hta.process import hta_figures
from overlapscope.trace.run.loader import RunTraces


class HtaStatus:
    RAN = "ran"
    NOT_INSTALLED = "HTA not installed (pip install HolisticTraceAnalysis==0.5.0)"
    NOT_APPLICABLE = "not applicable: CPU-only traces (HTA analyses GPU kernels only)"


@dataclass(frozen=True, slots=True)
class HtaReport:
    status: str
    include_last_profiler_step: bool = True
    ns_rounding: bool = True
    overlap_pct: dict[int, float] = field(default_factory=dict)
    temporal: pd.DataFrame | None = None  # rank, idle_time_us, compute_time_us, non_compute_time_us
    idle: pd.DataFrame | None = None  # rank, stream, idle_category, idle_time_us
    counted_steps: dict[int, list[int]] = field(default_factory=dict)
    # per rank: what HTA's rounding counts negatively (hta_negative_us), when it rounds
    negative: pd.DataFrame | None = None
    # per rank and stream: what those events change in its idle split (hta_idle_negative_us)
    idle_negative: pd.DataFrame | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.status != HtaStatus.RAN:
            return out
        out.update(
            include_last_profiler_step=self.include_last_profiler_step,
            ns_rounding=self.ns_rounding,
            overlap_pct={str(k): v for k, v in self.overlap_pct.items()},
            counted_steps={str(k): v for k, v in self.counted_steps.items()},
            temporal=[] if self.temporal is None else self.temporal.to_dict("records"),
            idle=[] if self.idle is None else self.idle.to_dict("records"),
        )
        return out


def hta_available() -> bool:
    """Whether HTA is installed (found, not imported: it runs in its own process)."""
    return importlib.util.find_spec("hta") is not None


def run_hta(run: RunTraces, *, include_last_profiler_step: bool = True) -> HtaReport:
    """Run HTA's overlap, temporal and idle-time breakdowns on the run's trace files, in a
    process of its own (:mod:`overlapscope.analysis.hta.process`)."""
    if not run.has_gpu:
        return HtaReport(HtaStatus.NOT_APPLICABLE)
    if not hta_available():
        return HtaReport(HtaStatus.NOT_INSTALLED)
    files = {r.rank: str(r.path.resolve()) for r in run.ranks if r.has_gpu}
    trace_dir = os.path.commonpath([os.path.dirname(p) for p in files.values()])
    rounding = os.environ.get("HTA_DISABLE_NS_ROUNDING", "0") not in ("1", "true", "True")
    got = hta_figures(files, trace_dir, include_last_profiler_step)
    if "error" in got:
        return HtaReport(got["error"])
    return HtaReport(
        HtaStatus.RAN,
        include_last_profiler_step=include_last_profiler_step,
        ns_rounding=rounding,
        overlap_pct=got["overlap"],
        temporal=got["temporal"],
        idle=got["idle"],
        counted_steps=got["steps"],
        negative=hta_negative_us(run) if rounding else None,
        idle_negative=hta_idle_negative_us(run) if rounding else None,
    )


def round_like_hta(run: RunTraces) -> RunTraces:
    """The run's GPU events rounded as HTA 0.5.0 rounds them (start up, end down to whole µs
    of the file's own clock; events that round to nothing keep zero length), so figures can
    be compared with HTA's to the µs. (Its steps are already HTA's: GPU work whose launch the
    trace lost counts where HTA counts it, trace/recognize/unlaunched.py.)"""
    ev = run.events
    offset = ev["rank"].map({r.rank: r.raw_ts_offset_us for r in run.ranks}).to_numpy()
    gpu = ev["on_gpu"].to_numpy()
    ts = ev["ts_us"].to_numpy()
    end = ev["end_us"].to_numpy()
    new_ts = np.where(gpu, np.ceil(ts + offset) - offset, ts)
    new_end = np.where(gpu, np.maximum(np.floor(end + offset) - offset, new_ts), end)
    events = ev.assign(ts_us=new_ts, end_us=new_end, dur_us=new_end - new_ts)
    return dataclasses.replace(run, events=events)


def unlaunched(ev: pd.DataFrame) -> np.ndarray:
    """GPU rows whose correlation id matches no CPU row of their rank, in ranks that record
    launches at all."""
    rank, corr = ev["rank"].to_numpy(np.int64), ev["correlation"].to_numpy(np.int64)
    gpu = ev["on_gpu"].to_numpy()
    span = int(corr.max(initial=0)) + 2
    key = rank * span + corr
    cpu = ~gpu & (corr >= 0)
    known = np.isin(key, key[cpu])
    return gpu & (corr >= 0) & ~known & np.isin(rank, np.unique(rank[cpu]))


def _hta_union_us(starts: np.ndarray, ends: np.ndarray) -> float:
    """The length of a union as HTA 0.5.0's ``merge_kernel_intervals`` measures it: intervals
    sorted by start, merged while they overlap, each group's ``max end - start`` summed. An
    event its rounding leaves with end < start (sub-µs: start rounded up, end down) that no
    other event covers is a group of negative length: HTA subtracts it."""
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    first = np.flatnonzero(np.r_[True, s[1:] > reach[:-1]])
    return float((np.maximum.reduceat(e, first) - s[first]).sum())


def hta_negative_us(run: RunTraces) -> pd.DataFrame:
    """Per rank: the µs HTA 0.5.0's temporal breakdown counts *negatively* (``compute_us``:
    in its compute time; ``busy_us``: in its compute + non-compute time), for sub-µs GPU
    events whose rounding leaves them with end < start while nothing else covers them. Our
    rounding (:func:`round_like_hta`) keeps such events at zero length, so HTA's figures are
    ours plus these (observed on torch 2.11 traces, whose timestamps carry nanoseconds)."""
    from overlapscope.analysis.timeline.metrics import counted_mask
    from overlapscope.analysis.timeline.partition import union

    ev = run.events[counted_mask(run).to_numpy() & run.events["on_gpu"].to_numpy()]
    offset = ev["rank"].map({r.rank: r.raw_ts_offset_us for r in run.ranks}).to_numpy()
    ts = np.ceil(ev["ts_us"].to_numpy() + offset) - offset
    end = np.floor(ev["end_us"].to_numpy() + offset) - offset
    compute = (ev["lane"] == "compute").to_numpy()
    rank = ev["rank"].to_numpy()
    rows = []
    for r in sorted({i.rank for i in run.ranks}):
        mine = rank == r
        parts = {}
        for name, mask in (("compute_us", mine & compute), ("busy_us", mine)):
            ours = union(ts[mask], end[mask]).total
            parts[name] = _hta_union_us(ts[mask], end[mask]) - ours
        rows.append({"rank": r, **parts})
    return pd.DataFrame(rows, columns=["rank", "compute_us", "busy_us"])


def hta_idle_negative_us(run: RunTraces) -> pd.DataFrame:
    """Per rank and stream: what HTA 0.5.0's idle-time breakdown gives beyond ours in its
    model (``analyze(run, hta_rounding=True).idle_streams``' ``hta_*`` columns), for the
    sub-µs GPU events its rounding leaves with end < start (:func:`hta_negative_us`): HTA
    measures the gap after such an event from its end, before its start, and compares the
    next launch with that end (``rank, stream, host_wait_us, kernel_wait_us, other_us``:
    HTA's figure minus ours; zero on a stream without such events)."""
    from overlapscope.analysis.host.calls import RankHost
    from overlapscope.analysis.timeline.metrics import counted_mask
    from overlapscope.analysis.waiting.idle import hta_streams

    ev = run.events[counted_mask(run).to_numpy()]
    offset = ev["rank"].map({r.rank: r.raw_ts_offset_us for r in run.ranks}).to_numpy()
    gpu = ev["on_gpu"].to_numpy()
    ts, end = ev["ts_us"].to_numpy(), ev["end_us"].to_numpy()
    ts = np.where(gpu, np.ceil(ts + offset) - offset, ts)
    theirs = np.where(gpu, np.floor(end + offset) - offset, end)  # (may end before it starts)
    ours = np.maximum(theirs, ts)  # (round_like_hta's)
    ev = ev.assign(ts_us=ts)
    frames = []
    rank = ev["rank"].to_numpy()
    for r in sorted({i.rank for i in run.ranks if i.has_gpu}):
        mine = np.flatnonzero(rank == r)
        rows = ev.iloc[mine].reset_index(drop=True)
        launched = RankHost.of(rows).launched.at
        a, b = hta_streams(rows, launched, theirs[mine]), hta_streams(rows, launched, ours[mine])
        diff = a.set_index("stream") - b.set_index("stream")
        frames.append(diff.reset_index().assign(rank=r))
    columns = ["rank", "stream", "host_wait_us", "kernel_wait_us", "other_us"]
    return (
        pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)
    )
