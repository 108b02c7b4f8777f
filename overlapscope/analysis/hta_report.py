"""Holistic Trace Analysis (HTA) figures beside ours, computed offline.

HTA is optional (``pip install overlapscope[hta]``). It is only run on traces with GPU
kernels: its GPU analyses give NaN or raise on CPU-only traces. Its pitfalls are avoided:
ranks are passed explicitly (``trace_files={rank: path}``; HTA's own rank regex fails on
compact JSON), the last profiler step is kept (``include_last_profiler_step=True``, HTA drops
it by default), and ``HTA_DISABLE_NS_ROUNDING`` is left as the caller has it (HTA rounds float
timestamps to whole µs unless it is set; the difference is reported in ``ns_rounding``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from overlapscope.trace.loader import RunTraces


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
    try:
        import hta.trace_analysis  # noqa: F401
    except ImportError:
        return False
    return True


def run_hta(run: RunTraces, *, include_last_profiler_step: bool = True) -> HtaReport:
    """Run HTA's overlap, temporal and idle-time breakdowns on the run's trace files."""
    if not run.has_gpu:
        return HtaReport(HtaStatus.NOT_APPLICABLE)
    if not hta_available():
        return HtaReport(HtaStatus.NOT_INSTALLED)
    from hta.trace_analysis import TraceAnalysis

    files = {r.rank: str(r.path.resolve()) for r in run.ranks if r.has_gpu}
    trace_dir = os.path.commonpath([os.path.dirname(p) for p in files.values()])
    rounding = os.environ.get("HTA_DISABLE_NS_ROUNDING", "0") not in ("1", "true", "True")
    sink = io.StringIO()
    hta_logger = logging.getLogger("hta")
    old_level = hta_logger.level
    hta_logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(sink):
            ta = TraceAnalysis(
                trace_files=files,
                trace_dir=trace_dir,
                include_last_profiler_step=include_last_profiler_step,
            )
            overlap = ta.get_comm_comp_overlap(visualize=False)
            temporal = _temporal(ta)
            idle = _idle(ta, sorted(files))
            steps = {int(r): [int(s) for s in ta.t.get_iterations(r)] for r in files}
    except Exception as e:  # HTA is third-party: any failure becomes a status, not a crash
        return HtaReport(f"failed: {type(e).__name__}: {e}")
    finally:
        hta_logger.setLevel(old_level)
    pct = {
        int(r): float(v)
        for r, v in zip(overlap["rank"], overlap["comp_comm_overlap_pctg"], strict=False)
    }
    return HtaReport(
        HtaStatus.RAN,
        include_last_profiler_step=include_last_profiler_step,
        ns_rounding=rounding,
        overlap_pct=pct,
        temporal=temporal,
        idle=idle,
        counted_steps=steps,
        negative=hta_negative_us(run) if rounding else None,
    )


def _temporal(ta: Any) -> pd.DataFrame | None:
    try:
        df = ta.get_temporal_breakdown(visualize=False)
    except Exception:
        return None
    keep = [
        c
        for c in (
            "rank",
            "idle_time(us)",
            "compute_time(us)",
            "non_compute_time(us)",
            "kernel_time(us)",
        )
        if c in df.columns
    ]
    out = df[keep].rename(columns=lambda c: c.replace("(us)", "_us"))
    return out.astype({c: float for c in out.columns if c != "rank"})


def _idle(ta: Any, ranks: list[int]) -> pd.DataFrame | None:
    try:
        res = ta.get_idle_time_breakdown(ranks=ranks, visualize=False)
    except Exception:
        return None
    df = res[0] if isinstance(res, tuple) else res
    if not isinstance(df, pd.DataFrame):
        return None
    out = df.rename(columns={"idle_time": "idle_time_us"})
    return out.reset_index(drop=True)


def round_like_hta(run: RunTraces) -> RunTraces:
    """The run with GPU events rounded as HTA 0.5.0 rounds them (start up, end down to whole
    µs of the file's own clock), so figures can be compared with HTA's to the µs. Events that
    round to nothing keep zero length."""
    ev = run.events
    offset = ev["rank"].map({r.rank: r.raw_ts_offset_us for r in run.ranks}).to_numpy()
    gpu = ev["on_gpu"].to_numpy()
    ts = ev["ts_us"].to_numpy()
    end = ev["end_us"].to_numpy()
    new_ts = np.where(gpu, np.ceil(ts + offset) - offset, ts)
    new_end = np.where(gpu, np.maximum(np.floor(end + offset) - offset, new_ts), end)
    events = ev.assign(ts_us=new_ts, end_us=new_end, dur_us=new_end - new_ts)
    return dataclasses.replace(run, events=events)


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
    from overlapscope.analysis.metrics import counted_mask
    from overlapscope.analysis.partition import union

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
