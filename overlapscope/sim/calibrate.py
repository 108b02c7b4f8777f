"""Calibrate the what-if model from one analysed run (``overlapscope run`` or torch FSDP).

Everything comes from the public tables of :class:`~overlapscope.analysis.RunAnalysis`
(the dashboard's cached analysis included) plus :class:`~overlapscope.sim.inputs.SimInputs`,
what the analysis does not keep and ``sim_inputs`` takes from the loaded run once
(``run.json``, the issue ranges, the memory curve per compute window; overlapscope/sim/inputs.py):

- compute: per rank, each counted step's ``ovs/<fwd|bwd|optim>/<unit>`` ranges (the root's in
  pieces: before, between and after the units), with the slow-down caused by communication
  running at the same time divided out (``contention``, overlapscope/sim/contention.py);
  torch FSDP runs: by time windows between the collectives (overlapscope/sim/torch_fsdp.py);
- issue cost per communication phase (the ``ovs/ag_*`` / ``ovs/rs`` ranges) and the per-step
  thread time outside every range (hooks, data, ``zero_grad``);
- one :class:`~overlapscope.sim.link.LinkModel` per collective kind, and per collective and
  step its lane time and the part of it after the fastest rank was done (the lag);
- memory: the measured memory curve per compute window (overlapscope/sim/memory.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd

from overlapscope.analysis import RunAnalysis
from overlapscope.errors import UserError
from overlapscope.manifest import RunManifest
from overlapscope.phases import CollectiveKind, Phase, issuing, values
from overlapscope.sim.contention import busy_fraction, fit_contention
from overlapscope.sim.facts import Facts, fsdp_framework, ovs_facts, torch_facts
from overlapscope.sim.gpu_calibrate import TorchGpu, gpu_device
from overlapscope.sim.inputs import SimInputs
from overlapscope.sim.launches import DeviceModel
from overlapscope.sim.link import (
    TCP_EFFICIENCY,
    LinkModel,
    bus_factor,
    fit_link,
    lane_time_us,
    per_collective,
)
from overlapscope.sim.memory import WindowKey
from overlapscope.sim.replay import RankTimes
from overlapscope.sim.schedule import OpKind, Program, Scenario, StepModel, build_program
from overlapscope.sim.torch_cuts import measured_places
from overlapscope.sim.torch_fsdp import attribute_compute

ALL_GATHER, REDUCE_SCATTER = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
# The collectives the link model is fitted for.
_MODELLED_KINDS = {
    k.value for p in (*issuing(ALL_GATHER), *issuing(REDUCE_SCATTER)) for k in p.kinds
}

__all__ = [
    "TCP_EFFICIENCY",
    "Calibration",
    "LinkModel",
    "Measured",
    "bus_factor",
    "calibrate",
]

ComputeTimes = dict[int, dict[tuple[Phase, str, int], float]]
COMPUTE_ROW_COLUMNS = ["rank", "step", "phase", "unit", "piece", "dur_us", "busy_frac"]


@dataclass(frozen=True, slots=True)
class Measured:
    """What the calibration run measured (means over ranks of per-step means)."""

    scenario: Scenario
    link_gbit: float | None
    step_time_us: float
    exposed_comm_us: float
    nccl_wait_us: float
    peak_mem_bytes: int  # max over ranks; 0 where the run recorded no memory
    max_alive_units: int
    max_alive_in_backward: int
    idle_us: float = float("nan")  # the device (CPU: the thread) doing nothing, per step


@dataclass(frozen=True, slots=True)
class Calibration:
    source: str
    framework: str  # "overlapscope", "fsdp1" or "fsdp2"
    world_size: int
    backend: str
    step_model: StepModel
    ranks: dict[int, RankTimes]
    links: dict[str, LinkModel]
    transfer_us: dict[tuple[str, Phase], float]  # mean lane time per (unit, phase)
    # one sample per counted step: that step's compute per rank and transfers (the replay
    # is run once per sample and averaged, so run-to-run variation is kept, not averaged
    # away before the max() of every dependency)
    step_compute_us: tuple[ComputeTimes, ...]
    dispatch_us: float  # pick-up latency of each collective on the comm thread
    step_transfer_us: tuple[dict[tuple[str, Phase], float], ...]
    # per step, the part of each lane time after the fastest rank was done (ranks' own lag,
    # not the wire: kept as is when the link is rescaled)
    step_lag_us: tuple[dict[tuple[str, Phase], float], ...]
    # the run's median lag per collective: up to it a lag is the ranks' own delay and is kept
    # when the link is rescaled; beyond it, it grew with the wire (rescale.rescale_lane_time)
    lag_fixed_us: float
    contention: float  # compute runs 1 + contention times slower while the queue is busy
    # per compute range: rank, step, phase, unit, piece, dur_us, busy_frac (contention fits)
    compute_rows: pd.DataFrame
    unit_full_bytes: dict[str, int]
    alive_unit_bytes: int  # full bytes of the largest non-root unit
    mem_baseline_bytes: dict[int, float]
    mem_peak_bytes: dict[int, int]  # measured, per rank
    # per rank, highest memory per compute window, and the measured schedule's alive units
    # per window (overlapscope/sim/memory.py); empty where the trace has no memory events
    mem_window_bytes: dict[int, dict[WindowKey, int]]
    measured_window_units: tuple[tuple[WindowKey, int], ...]
    peer_skew_us: float  # mean lag of the last rank to start a collective
    measured: Measured
    manifest: RunManifest | None  # the measured run's; None for torch traces
    device: DeviceModel | None = None  # GPU runs: host work and launches per op (launches.py)


# --------------------------------------------------------------------------- compute


def _ovs_compute_rows(a: RunAnalysis, counted: pd.DataFrame) -> pd.DataFrame:
    tl = a.timeline.merge(counted, on=["rank", "step"])
    comp = tl[(tl["lane"] == "compute")].copy()
    if comp.empty:
        raise UserError(
            "the run has no ovs/<phase>/<unit> compute ranges: record it with overlapscope "
            "run (not --no-instrument)"
        )
    comp["phase"] = comp["phase"].astype(str)
    comp["unit"] = comp["unit"].astype(str)
    comp["busy_frac"] = busy_fraction(comp, tl[tl["lane"] == "comm"])
    comp = comp.sort_values(["rank", "step", "start_us"])
    comp["piece"] = comp.groupby(["rank", "step", "phase", "unit"]).cumcount()
    return comp[["rank", "step", "phase", "unit", "piece", "dur_us", "busy_frac"]]


def _rank_times(comp: pd.DataFrame, contention: float, num_steps: int) -> ComputeTimes:
    """Mean base compute per step of each (phase, unit, piece), per rank."""
    base = comp["dur_us"] / (1 + contention * comp["busy_frac"])
    sums = comp.assign(base_us=base).groupby(["rank", "phase", "unit", "piece"])["base_us"].sum()
    out: ComputeTimes = {}
    for (r, phase, unit, piece), us in (sums / num_steps).items():
        out.setdefault(int(r), {})[(Phase(str(phase)), str(unit), int(piece))] = float(us)
    return out


def with_contention(calib: Calibration, contention: float) -> Calibration:
    """The calibration with another contention α (e.g. fitted across runs): every base
    compute duration re-derived from the measured ranges."""
    comp = calib.compute_rows
    steps = sorted(comp["step"].unique())
    compute = _rank_times(comp, contention, len(steps))
    ranks = {r: dataclasses.replace(t, compute_us=compute.get(r, {})) for r, t in calib.ranks.items()}  # fmt: skip
    per_step = tuple(_rank_times(comp[comp["step"] == s], contention, 1) for s in steps)
    return dataclasses.replace(calib, ranks=ranks, step_compute_us=per_step, contention=contention)


def _dispatch_us(comm: pd.DataFrame, issue: pd.DataFrame) -> float:
    """Mean time from "every rank issued it and every queue is free" to "the last rank's
    op started" (the backend thread's pick-up latency), over the run's collectives.

    "Issued" is the end of the issue range, as in the replay. On the engine's gloo runs the
    op usually starts before that range ends, so this comes out 0: the replay then starts each
    collective when its issue range ends, a little later than measured, which the
    self-replay error (docs/WHATIF.md) includes.

    The k-th communication op of a rank belongs to its k-th issue range (one queue, issue
    order); collectives are matched across ranks by that position within the step.
    """
    comm = comm.sort_values(["rank", "start_us"])
    issue = issue.sort_values(["rank", "ts_us"])
    if comm.empty or len(comm) != len(issue):
        return 0.0
    by = comm.groupby(["rank", "step"])
    comm = comm.assign(
        k=by.cumcount().to_numpy(),
        prev_end=by["end_us"].shift(1).to_numpy(),
        issued=issue["end_us"].to_numpy(),
    )
    comm["ready"] = comm[["prev_end", "issued"]].max(axis=1)
    g = comm.groupby(["step", "k"])
    lag = (g["start_us"].max() - g["ready"].max()).clip(lower=0)
    return float(lag.mean()) if len(lag) else 0.0


def _issue_costs(
    issue: pd.DataFrame, steps: pd.DataFrame, num_steps: int, num_compute_ops: int
) -> dict[int, RankTimes]:
    """Per rank: mean issue range per comm phase, and the thread time outside every range
    spread evenly before each compute op."""
    out = {}
    for r, st in steps.groupby("rank"):
        iss = issue[issue["rank"] == r]
        issue_us = {
            Phase(str(p)): float(g.mean())
            for p, g in iss.groupby(iss["phase"].astype(str))["dur_us"]
            if p in {x.value for x in Phase}
        }
        outside = st["step_time_us"] - st["compute_us"] - st["nccl_wait_us"] - st["limiter_us"]
        overhead = float(outside.mean()) - float(iss["dur_us"].sum()) / num_steps
        out[int(r)] = RankTimes({}, issue_us, gap_us=max(overhead, 0.0) / num_compute_ops)
    return out


def _ranks(
    comp: pd.DataFrame,
    contention: float,
    issue: pd.DataFrame,
    steps: pd.DataFrame,
    num_steps: int,
    program: Program,
) -> dict[int, RankTimes]:
    """Per rank: mean base compute per op, issue costs and the spread per-step overhead."""
    num_compute_ops = sum(op.kind is OpKind.COMPUTE for op in program.ops)
    compute = _rank_times(comp, contention, num_steps)
    return {
        r: dataclasses.replace(t, compute_us=compute.get(r, {}))
        for r, t in _issue_costs(issue, steps, num_steps, num_compute_ops).items()
    }


# --------------------------------------------------------------------------- link, measured


def _counted(a: RunAnalysis, source: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The counted (rank, step) pairs, and the FSDP collectives matched in them."""
    counted = pd.DataFrame(
        [(r, s) for r, steps in a.counted_steps.items() for s in steps], columns=["rank", "step"]
    )
    if counted.empty:
        raise UserError(f"{source or 'run'}: no profiled steps to calibrate from")
    coll = a.collectives.merge(counted.drop_duplicates("step")[["step"]], on="step")
    coll = coll.assign(unit=coll["unit"].astype(str), phase=coll["phase"].astype(str))
    coll = coll[coll["phase"].isin(values((*issuing(ALL_GATHER), *issuing(REDUCE_SCATTER))))]
    if coll.empty:
        raise UserError("the run has no matched collectives across ranks to calibrate the link")
    return counted, coll


def _links(coll: pd.DataFrame, world: int) -> dict[str, LinkModel]:
    """One link model per collective kind, fitted to the fastest rank's durations."""
    return {
        str(k): fit_link(str(k), g, world)
        for k, g in coll.groupby(coll["kind"].astype(str))
        if str(k) in _MODELLED_KINDS
    }


def _with_lane_times(coll: pd.DataFrame) -> pd.DataFrame:
    """``transfer_us`` becomes each collective's lane time; ``lag_us`` its part after the
    fastest rank was done."""
    lane = lane_time_us(coll)
    return coll.assign(transfer_us=lane, lag_us=(lane - coll["transfer_us"]).clip(lower=0.0))


def _measured(a: RunAnalysis, facts: Facts) -> Measured:
    rk = a.ranks
    return Measured(
        scenario=facts.scenario,
        link_gbit=facts.link_gbit,
        step_time_us=float(rk["step_time_per_step_us"].mean()),
        exposed_comm_us=float(rk["exposed_comm_per_step_us"].mean()),
        nccl_wait_us=float(rk["nccl_wait_per_step_us"].mean()),
        peak_mem_bytes=max(facts.peaks, default=0),
        max_alive_units=facts.max_alive_units,
        max_alive_in_backward=facts.max_alive_in_backward,
        idle_us=float(rk["idle_per_step_us"].mean()),
    )


# --------------------------------------------------------------------------- public


def _facts(
    a: RunAnalysis, inputs: SimInputs, coll: pd.DataFrame
) -> tuple[Facts, bool, TorchGpu | None, pd.DataFrame]:
    """The run's facts; whether it is an engine run (run.json names one; ovs_facts says in
    one line what a damaged one lacks); a torch GPU run's calls; the matched collectives
    (a torch GPU run's with its root named ``root``)."""
    meta = inputs.manifest
    if meta is not None and (meta.is_engine_run or meta.engine is not None):
        return ovs_facts(meta, coll, inputs.source), True, None, coll
    if inputs.gpu is None or inputs.host is None:
        return torch_facts(a, coll), False, None, coll
    fsdp_framework(a)  # (before reading the calls: one line for a trace of no FSDP run)
    tg = TorchGpu.of(inputs.gpu, inputs.host, coll)
    places = measured_places(tg.calls, tg.gpu)
    return torch_facts(a, tg.calls, places), False, tg, tg.coll


def _compute(
    a: RunAnalysis, inputs: SimInputs, counted: pd.DataFrame, program: Program, is_ovs: bool
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The training thread's compute rows and issue rows (CPU replay, contention fits)."""
    if is_ovs:
        return _ovs_compute_rows(a, counted), inputs.issue.merge(counted, on=["rank", "step"])
    if a.summary.has_gpu:  # torch on GPU: the device replay reads the kernels themselves
        return pd.DataFrame(columns=COMPUTE_ROW_COLUMNS), inputs.issue.iloc[:0]
    tl = a.timeline.merge(counted, on=["rank", "step"])
    steps = a.steps.merge(counted, on=["rank", "step"])
    comp = attribute_compute(tl, steps, program)
    return comp, inputs.issue.iloc[:0]  # torch on CPU: issue and transfer are one call


StepTransfers = dict[tuple[str, Phase], float]


def _step_samples(
    comp: pd.DataFrame, coll: pd.DataFrame, contention: float, step_numbers: list[int]
) -> tuple[tuple[ComputeTimes, ...], tuple[StepTransfers, ...], tuple[StepTransfers, ...]]:
    """One sample per counted step (``Calibration.step_*``): that step's base compute per
    rank, and its lane time and lag per collective."""
    return (
        tuple(_rank_times(comp[comp["step"] == s], contention, 1) for s in step_numbers),
        tuple(per_collective(coll[coll["step"] == s]) for s in step_numbers),
        tuple(
            per_collective(coll[coll["step"] == s], "lag_us", keep_zero=True) for s in step_numbers
        ),
    )


def calibrate(a: RunAnalysis, inputs: SimInputs) -> Calibration:
    """Build the model of one run (overlapscope CPU/gloo or CUDA/NCCL, or torch FSDP on CPU
    or GPU; ``full_shard``) from its analysis and :class:`SimInputs`."""
    meta = inputs.manifest
    counted, coll = _counted(a, inputs.source)
    num_steps = int(counted.groupby("rank").size().min())
    world = int(a.summary.world_size)
    facts, is_ovs, torch_gpu, coll = _facts(a, inputs, coll)
    links = _links(coll, world)
    coll = _with_lane_times(coll)
    step_numbers = sorted(a.counted_steps[min(a.counted_steps)])

    # compute, contention, issue costs, per-step overhead; on GPU the device model
    measured_program = build_program(facts.model, facts.scenario)
    steps = a.steps.merge(counted, on=["rank", "step"])
    comp, issue = _compute(a, inputs, counted, measured_program, is_ovs)
    device = None
    if inputs.gpu is not None and inputs.host is not None:  # a GPU run: the device model
        device, coll = gpu_device(
            inputs.gpu, inputs.host, a.counted_steps, coll, measured_program, torch_gpu
        )
        links = _links(coll, world) if device.host_transfers else links  # (from the copy on)
    # on a GPU the kernels are measured as they ran: no slow-down to divide out
    contention = 0.0 if device else fit_contention(comp, facts.full_bytes)
    ranks = _ranks(comp, contention, issue, steps, num_steps, measured_program)
    comm_rows = a.timeline.merge(counted, on=["rank", "step"])
    step_compute, step_transfer, step_lag = _step_samples(comp, coll, contention, step_numbers)
    # memory: the largest unit's full bytes; per rank the peak, and the measured curve
    alive_bytes = max((facts.full_bytes.get(u, 0) for u in facts.model.units), default=0)
    peaks, mem_units = facts.peaks, measured_program.max_mem_units_in_backward
    return Calibration(
        source=inputs.source,
        framework=facts.framework,
        world_size=world,
        backend=facts.backend,
        step_model=facts.model,
        ranks=ranks,
        links=links,
        transfer_us=per_collective(coll),
        step_compute_us=step_compute,
        step_transfer_us=step_transfer,
        step_lag_us=step_lag,
        lag_fixed_us=float(coll["lag_us"].median()),
        dispatch_us=_dispatch_us(comm_rows[comm_rows["lane"] == "comm"], issue),
        contention=contention,
        compute_rows=comp.reset_index(drop=True),
        unit_full_bytes=facts.full_bytes,
        alive_unit_bytes=alive_bytes,
        mem_baseline_bytes={r: float(p - mem_units * alive_bytes) for r, p in enumerate(peaks)},
        mem_peak_bytes=dict(enumerate(peaks)),
        mem_window_bytes={r: w for r, w in inputs.mem_windows.items() if r < len(peaks)},
        measured_window_units=measured_program.window_units,
        peer_skew_us=float(coll["straggler_lag_us"].mean()) if len(coll) else 0.0,
        measured=_measured(a, facts),
        manifest=meta,
        device=device,
    )
