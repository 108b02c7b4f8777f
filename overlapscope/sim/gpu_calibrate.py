"""Calibrate the GPU what-if (:class:`~overlapscope.sim.launches.DeviceModel`) from a run's
GPU rows and host rows (``SimInputs.gpu`` / ``SimInputs.host``, taken from the loaded run).

Per counted step and rank: the step's landmarks (``launches.step_window``), where each op of
the measured program ran on the host (the engine's ``ovs/`` ranges, ``sim/engine_cuts.py``;
torch FSDP's collectives and hooks, ``sim/torch_cuts.py``), the host's blocked time, and the
step's GPU activities by the segment that launched them (``launches.host_step``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.analysis.intervals import Intervals
from overlapscope.sim.engine_cuts import engine_cuts
from overlapscope.sim.launches import (
    Cut,
    DeviceModel,
    HostStep,
    StepWindow,
    compute_stream,
    host_step,
    launch_latency_us,
    step_window,
)
from overlapscope.sim.schedule import Program
from overlapscope.sim.torch_cuts import as_root, root_alias, torch_collectives, torch_cuts
from overlapscope.trace.attribution import launch_anchor

GPU_COLUMNS = ["rank", "step", "stream", "lane", "phase", "unit", "kind", "bytes", "name", "ts_us", "end_us", "dur_us", "launch_us"]  # fmt: skip
HOST_COLUMNS = ["rank", "step", "tid", "lane", "phase", "unit", "name", "ts_us", "end_us", "dur_us"]  # fmt: skip

# (rank, its host rows, the step's GPU rows, the step's window, the measured program, the
# step's host transfers' ends by (unit, phase)) -> the program's ops on the host, blocked
# time, where the host waited for the device to drain
CutFinder = Callable[
    [int, pd.DataFrame, pd.DataFrame, StepWindow, Program, dict[tuple[str, str], float]],
    tuple[list[Cut], Intervals, tuple[float, ...]],
]


def gpu_rows(events: pd.DataFrame) -> pd.DataFrame:
    """The GPU activities of the profiled steps, each with its launch call's start."""
    parts = []
    for _, ev in events.groupby("rank", sort=True):
        ev = ev.reset_index(drop=True)
        anchor_ts, _, _ = launch_anchor(ev)
        ev = ev.assign(launch_us=anchor_ts)
        parts.append(ev[ev["on_gpu"].to_numpy() & (ev["step"] >= 0).to_numpy()])
    out = pd.concat(parts, ignore_index=True) if parts else events.iloc[:0].assign(launch_us=0.0)
    return out[GPU_COLUMNS].assign(lane=out["lane"].astype(str))


def host_rows(events: pd.DataFrame) -> pd.DataFrame:
    """The host's rows of the profiled steps (and every step range)."""
    ev = events[~events["on_gpu"] & ((events["step"] >= 0) | (events["lane"] == "step"))]
    return ev[HOST_COLUMNS].assign(lane=ev["lane"].astype(str)).reset_index(drop=True)


def _transfer_ends(host: pd.DataFrame) -> dict[tuple[int, int, str, str], float]:
    """Per (rank, step, unit, phase): the end of the collective that ran on the host."""
    comm = host[(host["lane"] == "comm") & host["phase"].notna() & host["unit"].notna()]
    ends = comm.groupby(["rank", "step", "unit", "phase"], observed=True)["end_us"].max()
    return {(int(r), int(s), str(u), str(p)): float(e) for (r, s, u, p), e in ends.items()}


def _step_starts(host: pd.DataFrame) -> dict[tuple[int, int], tuple[float, float]]:
    ps = host[host["lane"] == "step"]
    return {
        (int(r), int(s)): (float(a), float(b))
        for r, s, a, b in zip(ps["rank"], ps["step"], ps["ts_us"], ps["end_us"], strict=True)
    }


def device_model(
    gpu: pd.DataFrame,
    host: pd.DataFrame,
    counted: dict[int, tuple[int, ...]],
    program: Program,
    cuts: CutFinder,
    gathers_follow_compute: bool = True,
) -> DeviceModel:
    """The measured steps of every rank, cut by ``cuts`` into the measured program's ops."""
    starts = _step_starts(host)
    ends = _transfer_ends(host)
    steps = sorted(counted[min(counted)])
    out: list[dict[int, HostStep]] = []
    for step in steps:
        per_rank: dict[int, HostStep] = {}
        for rank in sorted(counted):
            h = host[host["rank"] == rank]
            g = gpu[(gpu["rank"] == rank) & (gpu["step"] == step)]
            nxt = starts.get((rank, step + 1), (np.nan, np.nan))[0]
            win = step_window(step, h, nxt, float(g["end_us"].max()) if len(g) else -np.inf)
            mine = {(u, p): e for (r, s, u, p), e in ends.items() if r == rank and s == step}
            c, blocked, drains = cuts(rank, h, g, win, program, mine)
            per_rank[rank] = host_step(win, c, blocked, g, _mean_after(starts, rank), drains)
        out.append(per_rank)
    host_comm = host[(host["lane"] == "comm") & host["phase"].notna()]
    return DeviceModel(
        steps=tuple(out),
        compute_stream={r: compute_stream(gpu[gpu["rank"] == r]) for r in sorted(counted)},
        launch_latency_us=launch_latency_us(gpu),
        host_transfers=frozenset(
            zip(host_comm["unit"].astype(str), host_comm["phase"].astype(str), strict=True)
        ),
        gathers_follow_compute=gathers_follow_compute,
    )


@dataclass(frozen=True, slots=True)
class TorchGpu:
    """A torch FSDP GPU run's collective calls (the device misses some: FSDP2's in-place
    all-gather at world size 1), its matched collectives and GPU rows, the root named
    ``root`` throughout (sim/torch_cuts.py)."""

    calls: pd.DataFrame
    coll: pd.DataFrame
    gpu: pd.DataFrame

    @staticmethod
    def of(gpu: pd.DataFrame, host: pd.DataFrame, coll: pd.DataFrame) -> TorchGpu:
        calls = torch_collectives(host, gpu)
        calls = calls[calls["step"].isin(coll["step"].unique())]
        alias = root_alias(calls)
        return TorchGpu(as_root(calls, alias), as_root(coll, alias), as_root(gpu, alias))


def gpu_device(
    gpu: pd.DataFrame,
    host: pd.DataFrame,
    counted: dict[int, tuple[int, ...]],
    coll: pd.DataFrame,
    program: Program,
    torch_gpu: TorchGpu | None,
) -> tuple[DeviceModel, pd.DataFrame]:
    """A GPU run's device model, and its matched collectives with the host transfers' lane
    times from the copy to the host on (:func:`host_transfer_us`)."""
    cuts: CutFinder = lambda r, h, g, w, p, e: engine_cuts(h, w, p, e)  # noqa: E731
    if torch_gpu is not None:
        calls, gpu = torch_gpu.calls, torch_gpu.gpu
        cuts = lambda r, h, g, w, p, e: torch_cuts(  # noqa: E731
            h, g, calls[(calls["rank"] == r) & (calls["step"] == w.step)], w, p
        )
    # torch FSDP gathers on its own streams; the engine on the compute stream
    device = device_model(gpu, host, counted, program, cuts, torch_gpu is None)
    return device, with_host_transfers(coll, gpu, host, device)


def with_host_transfers(
    coll: pd.DataFrame, gpu: pd.DataFrame, host: pd.DataFrame, device: DeviceModel
) -> pd.DataFrame:
    """On a GPU run, a collective that ran on the host holds its lane from the moment every
    rank's copy to the host was done (sim/gpu_calibrate.py), with no lag beyond it."""
    if not device.host_transfers:
        return coll
    times = host_transfer_us(gpu, host, device.compute_stream)
    keys = zip(coll["step"].astype(int), coll["unit"].astype(str), coll["phase"].astype(str), strict=True)  # fmt: skip
    lane = pd.Series([times.get(k, np.nan) for k in keys], index=coll.index)
    mine = lane.notna()
    return coll.assign(
        transfer_us=coll["transfer_us"].where(~mine, lane),
        lag_us=coll["lag_us"].where(~mine, 0.0),
    )


def _mean_after(starts: dict[tuple[int, int], tuple[float, float]], rank: int) -> float:
    """Mean time from a step range's end to the next one's start on ``rank``."""
    gaps = [
        starts[(rank, s + 1)][0] - end
        for (r, s), (_, end) in starts.items()
        if r == rank and (rank, s + 1) in starts
    ]
    return float(np.mean(gaps)) if gaps else 0.0


def host_transfer_us(
    gpu: pd.DataFrame, host: pd.DataFrame, compute: dict[int, int]
) -> dict[tuple[int, str, str], float]:
    """Per (step, unit, phase): how long a collective that ran on the host held its lane once
    every rank's copy to the host was done: from the last rank ready to the last rank done
    (the lane time, ``sim/link.py``). The engine's staged gloo posts the ring's receives at
    issue, so its recorded op also holds the wait for the device-to-host copy, which waits
    for the compute queued before it; the replay places that copy itself. Times on the
    analysis' aligned clocks (``sim_inputs``)."""
    comm = host[(host["lane"] == "comm") & host["phase"].notna() & host["unit"].notna()]
    issue = host[(host["lane"] == "issue") & host["phase"].notna() & host["unit"].notna()]
    ready: dict[tuple[int, str, str], float] = {}
    done: dict[tuple[int, str, str], float] = {}
    for (r, s, u, p), rows in comm.groupby(["rank", "step", "unit", "phase"], observed=True):
        start = float(rows["ts_us"].min())
        rng = issue[(issue["rank"] == r) & (issue["step"] == s) & (issue["unit"] == u) & (issue["phase"] == p)]  # fmt: skip
        if len(rng):
            lo, hi = float(rng["ts_us"].min()), float(rng["end_us"].max())
            g = gpu[(gpu["rank"] == r) & (gpu["stream"] != compute.get(int(r), -1))]
            copies = g[(g["launch_us"] >= lo) & (g["launch_us"] <= hi)]
            if len(copies):
                start = max(start, float(copies["end_us"].max()))
        key = (int(s), str(u), str(p))
        ready[key] = max(ready.get(key, -np.inf), start)
        done[key] = max(done.get(key, -np.inf), float(rows["end_us"].max()))
    return {k: max(done[k] - ready[k], 0.0) for k in ready}
