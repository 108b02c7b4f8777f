"""What the host and the device do for each op of a GPU step: the GPU what-if's calibration.

On a GPU the training thread's ranges are *launch* time; the device's work is the kernels,
copies and collectives they launch. Per rank and counted step the host's timeline is cut into
one :class:`Segment` per op of the measured program (the op's own range and the host time
before it, since the previous op ended), plus a head (the step's start to the first op: the
batch, its copy to the device) and a tail (the last op to the step's closing
synchronisation). Each GPU activity belongs to the segment whose host time launched it (its
launch call, by correlation id), at its offset from the segment's start, with its stream and
duration.

Host time spent *blocked* is taken out of the segments (the host's *work* clock): waiting for
a transfer that runs on the host (the engine's gloo on CUDA, staged through host memory), the
rate limiter, the step's closing synchronisation. The replay (``sim/device_replay.py``)
re-creates the blocking from what the host waits for, under the predicted schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.analysis.intervals import Intervals, covered
from overlapscope.errors import UserError
from overlapscope.sim.schedule import Op, OpKind

OpKey = tuple[str, str, str, int]  # (op kind, phase, unit, piece): the same under every policy

# The host's calls that wait for the device (the step's closing synchronisation is the last).
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")


def op_key(op: Op) -> OpKey:
    return (op.kind.value, op.phase.value, op.unit, op.piece if op.kind is OpKind.COMPUTE else 0)


@dataclass(frozen=True, slots=True)
class Launch:
    """One GPU activity, launched ``offset_us`` of host work after its segment began."""

    offset_us: float
    dur_us: float
    stream: int
    lane: str  # the analysis' lane: compute, memory or comm
    phase: str | None
    unit: str | None
    transfer: bool = False  # the collective's own transfer: its time follows the link model


@dataclass(frozen=True, slots=True)
class Segment:
    """One op's host work and what it launches."""

    work_us: float  # from the previous op's end to this op's end, blocked time left out
    range_us: float  # of which the op's own range (the rest: hooks, autograd, Python)
    launches: tuple[Launch, ...]  # by offset
    block_at_us: float = math.nan  # a wait on a host transfer: where the host blocks
    # where the host waits until the device has done all it launched (the engine's wait
    # for its offload copies, ``ovs/d2h.wait``)
    drains_at_us: tuple[float, ...] = ()


EMPTY = Segment(0.0, 0.0, ())


@dataclass(frozen=True, slots=True)
class HostStep:
    """One rank's measured step: head, one segment per op, tail, the closing synchronisation."""

    head: Segment
    ops: dict[OpKey, Segment]
    tail: Segment
    sync_return_us: float  # from the device's last activity to the synchronisation's return
    after_us: float  # from that return to the next step's start (the loop, the profiler)


@dataclass(frozen=True, slots=True)
class DeviceModel:
    """The GPU what-if's calibration (``Calibration.device``; None for CPU runs)."""

    steps: tuple[dict[int, HostStep], ...]  # per counted step, per rank
    compute_stream: dict[int, int]  # per rank: the stream with the most compute
    launch_latency_us: float  # from a launch call to its kernel's start on an idle stream
    host_transfers: frozenset[tuple[str, str]]  # (unit, phase) of collectives moved by the host
    # an all-gather's launches wait for the compute queued before them (the engine issues
    # on the compute stream, which NCCL's stream and the staging copy wait on); torch FSDP
    # gathers on its own streams, ordered after nothing the compute stream runs
    gathers_follow_compute: bool = True


@dataclass(frozen=True, slots=True)
class Cut:
    """Where one op of the measured program ran on the host (µs, the trace's clock)."""

    key: OpKey
    start_us: float
    end_us: float
    block_at_us: float = math.nan  # where it blocked on a host transfer (its range's start)


@dataclass(frozen=True, slots=True)
class StepWindow:
    """One rank-step's host landmarks (µs, the trace's clock)."""

    step: int
    start_us: float  # ProfilerStep#N's start
    end_us: float  # and end
    sync_start_us: float  # the closing synchronisation
    sync_end_us: float
    next_start_us: float  # the next step's start (nan: not in the trace)


class WorkClock:
    """Host time since the step's start with the blocked intervals left out."""

    def __init__(self, origin_us: float, blocked: Intervals) -> None:
        self.origin, self.blocked = origin_us, blocked

    def __call__(self, t_us: np.ndarray) -> np.ndarray:
        t = np.maximum(np.asarray(t_us, dtype=np.float64), self.origin)
        return t - self.origin - covered(self.blocked, np.full(len(t), self.origin), t)


def step_window(step: int, host: pd.DataFrame, next_start_us: float, gpu_end_us: float) -> StepWindow:  # fmt: skip
    """The landmarks of one rank-step from its CPU rows (``host``): the ProfilerStep range
    and the last synchronisation call in it, which must outlast the step's device work
    (else the host ran into the next step and the steps cannot be replayed apart)."""
    ps = host[(host["lane"] == "step") & (host["step"] == step)]
    if ps.empty:
        raise UserError(f"step {step}: no ProfilerStep range")
    start, end = float(ps["ts_us"].iloc[0]), float(ps["end_us"].iloc[0])
    names = host["name"].astype(str)
    sync = host[names.isin(SYNC_CALLS) & (host["ts_us"] >= start) & (host["ts_us"] < end)]
    if sync.empty or float(sync["end_us"].max()) < gpu_end_us:
        raise UserError(
            f"step {step}: the host does not wait for the device at the step's end; the GPU "
            "what-if needs the steps apart (torch.cuda.synchronize() before each step ends)"
        )
    last = sync.sort_values("end_us").iloc[-1]
    return StepWindow(step, start, end, float(last["ts_us"]), float(last["end_us"]), next_start_us)


def _launches(gpu: pd.DataFrame, w_launch: np.ndarray, seg_start: float) -> tuple[Launch, ...]:
    order = np.argsort(w_launch, kind="stable")
    return tuple(
        Launch(
            offset_us=max(float(w_launch[i]) - seg_start, 0.0),
            dur_us=float(gpu["dur_us"].iat[i]),
            stream=int(gpu["stream"].iat[i]),
            lane=str(gpu["lane"].iat[i]),
            phase=None if pd.isna(gpu["phase"].iat[i]) else str(gpu["phase"].iat[i]),
            unit=None if pd.isna(gpu["unit"].iat[i]) else str(gpu["unit"].iat[i]),
            transfer=str(gpu["lane"].iat[i]) == "comm",
        )
        for i in order
    )


def host_step(
    win: StepWindow,
    cuts: list[Cut],
    blocked: Intervals,
    gpu: pd.DataFrame,
    mean_after_us: float,
    drains_us: tuple[float, ...] = (),
) -> HostStep:
    """Cut one rank-step into segments. ``cuts``: the measured program's ops in order;
    ``blocked``: host time spent waiting; ``gpu``: the step's GPU rows with their launch
    time (``launch_us``); ``drains_us``: where the host waited for the device to drain."""
    clock = WorkClock(win.start_us, blocked)
    starts = clock(np.array([c.start_us for c in cuts]))
    ends = np.maximum.accumulate(clock(np.array([c.end_us for c in cuts])))
    sync = float(clock(np.array([win.sync_start_us]))[0])
    bounds = np.concatenate([[0.0, starts[0]], ends, [max(sync, ends[-1])]])
    w = np.minimum(clock(gpu["launch_us"].to_numpy()), bounds[-1])
    seg = np.clip(np.searchsorted(bounds, w, side="right") - 1, 0, len(bounds) - 2)
    wd = np.minimum(clock(np.asarray(drains_us, dtype=np.float64)), bounds[-1])
    seg_d = np.clip(np.searchsorted(bounds, wd, side="right") - 1, 0, len(bounds) - 2)
    segments = []
    for i in range(len(bounds) - 1):
        mine = seg == i
        lo, hi = float(bounds[i]), float(bounds[i + 1])
        range_us, block_at = 0.0, math.nan
        if 1 <= i <= len(cuts):
            cut = cuts[i - 1]
            range_us = min(max(hi - float(starts[i - 1]), 0.0), hi - lo)
            if not math.isnan(cut.block_at_us):
                block_at = float(clock(np.array([cut.block_at_us]))[0]) - lo
        launches = _launches(gpu[mine], w[mine], lo)
        if not math.isnan(block_at):
            block_at = min(max(block_at, 0.0), hi - lo)
        drains = tuple(float(x) - lo for x in wd[seg_d == i])
        segments.append(Segment(hi - lo, range_us, launches, block_at, drains))
    device_end = float(gpu["end_us"].max()) if len(gpu) else win.sync_start_us
    after = (
        win.next_start_us - win.sync_end_us
        if math.isfinite(win.next_start_us)
        else win.end_us - win.sync_end_us + mean_after_us
    )
    return HostStep(
        head=segments[0],
        ops={c.key: s for c, s in zip(cuts, segments[1:-1], strict=True)},
        tail=segments[-1],
        sync_return_us=max(win.sync_end_us - max(win.sync_start_us, device_end), 0.0),
        after_us=max(after, 0.0),
    )


def launch_latency_us(gpu: pd.DataFrame) -> float:
    """How long after its launch call a GPU activity starts on a stream with nothing before
    it: the lower quartile over such activities (the rest wait for another stream)."""
    g = gpu.sort_values(["rank", "stream", "ts_us"])
    prev_end = g.groupby(["rank", "stream"])["end_us"].shift(1)
    idle = g[prev_end.isna() | (prev_end < g["launch_us"])]
    delay = (idle["ts_us"] - idle["launch_us"]).to_numpy()
    delay = delay[delay >= 0]
    return float(np.quantile(delay, 0.25)) if len(delay) else 0.0


def compute_stream(gpu: pd.DataFrame) -> int:
    """The stream with the most compute kernel time (the model's stream)."""
    comp = gpu[gpu["lane"] == "compute"]
    if comp.empty:
        raise UserError("the run has no GPU compute kernels in its profiled steps")
    return int(comp.groupby("stream")["dur_us"].sum().idxmax())
