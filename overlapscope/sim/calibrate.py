"""Calibrate the what-if model from one analysed overlapscope run.

Everything comes from the public tables of :class:`~overlapscope.analysis.RunAnalysis`, the
event table of :class:`~overlapscope.trace.loader.RunTraces` (issue ranges) and ``run.json``:

- compute: per rank, mean over the counted steps of each ``ovs/<fwd|bwd|optim>/<unit>`` range
  (the root's ranges come in pieces: before, between and after the units), with the
  slow-down caused by communication running at the same time divided out (``contention``);
- issue cost per communication phase (the ``ovs/ag_*`` / ``ovs/rs`` ranges) and the per-step
  thread time outside every range (hooks, data, ``zero_grad``);
- one :class:`LinkModel` per collective kind, fitted to the matched collectives' transfer
  times (fastest rank's duration: the wire);
- per collective and step, its lane time (last rank's start to last rank's end:
  :func:`_lane_time_us`) and the part of it after the fastest rank was done (the lag);
- memory: a per-rank baseline = measured peak − alive full units in backward × unit bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.analysis import RunAnalysis
from overlapscope.errors import UserError
from overlapscope.sim.memory import WindowKey, window_peaks
from overlapscope.sim.schedule import (
    OpKind,
    Policy,
    RankTimes,
    Scenario,
    StepModel,
    build_program,
)
from overlapscope.trace.loader import RunTraces
from overlapscope.trace.names import ROOT_UNIT, Phase

TCP_EFFICIENCY = 0.956  # TCP payload per tbf-counted byte at MTU 1500 (docs/LAB.md)
MAX_CONTENTION = 1.5
# Fit contention only where the units' busy fractions differ by this much (standard
# deviation): where the queue is busy through every unit (backward_pre on a slow link) or
# through none, the slope is rounding noise (it came out at the 1.5 cap on one such run and
# halved its compute: a 27 % wrong prediction).
MIN_BUSY_SPREAD = 0.05


def bus_factor(kind: str, world_size: int) -> float:
    """nccl-tests' bus-bandwidth factor: busbw = algbw × factor."""
    n = world_size
    match kind:
        case "all_gather" | "reduce_scatter":
            return (n - 1) / n
        case "all_reduce":
            return 2 * (n - 1) / n
        case _:
            return 1.0


@dataclass(frozen=True, slots=True)
class LinkModel:
    """``transfer_us = latency_us + bytes × factor / busbw_bytes_per_us``."""

    kind: str
    latency_us: float
    busbw_bytes_per_us: float
    factor: float
    num_samples: int

    def transfer_us(self, nbytes: int, bandwidth_scale: float = 1.0) -> float:
        return self.latency_us + nbytes * self.factor / (self.busbw_bytes_per_us * bandwidth_scale)

    def with_busbw(self, busbw_bytes_per_us: float) -> LinkModel:
        return LinkModel(
            self.kind, self.latency_us, busbw_bytes_per_us, self.factor, self.num_samples
        )


@dataclass(frozen=True, slots=True)
class Measured:
    """What the calibration run measured (means over ranks of per-step means)."""

    scenario: Scenario
    link_gbit: float | None
    step_time_us: float
    exposed_comm_us: float
    nccl_wait_us: float
    peak_mem_bytes: int  # max over ranks
    max_alive_units: int
    max_alive_in_backward: int


@dataclass(frozen=True, slots=True)
class Calibration:
    source: str
    world_size: int
    backend: str
    step_model: StepModel
    ranks: dict[int, RankTimes]
    links: dict[str, LinkModel]
    transfer_us: dict[tuple[str, Phase], float]  # mean lane time per (unit, phase)
    # one sample per counted step: that step's compute per rank and transfers (the replay
    # is run once per sample and averaged, so run-to-run variation is kept, not averaged
    # away before the max() of every dependency)
    step_compute_us: tuple[dict[int, dict[tuple[Phase, str, int], float]], ...]
    dispatch_us: float  # pick-up latency of each collective on the comm thread
    step_transfer_us: tuple[dict[tuple[str, Phase], float], ...]
    # per step, the part of each lane time after the fastest rank was done (ranks' own lag,
    # not the wire: kept as is when the link is rescaled)
    step_lag_us: tuple[dict[tuple[str, Phase], float], ...]
    contention: float  # compute runs 1 + contention times slower while the queue is busy
    unit_full_bytes: dict[str, int]
    unit_shard_bytes: dict[str, int]
    alive_unit_bytes: int  # full bytes of the largest non-root unit
    mem_baseline_bytes: dict[int, float]
    mem_peak_bytes: dict[int, int]  # measured, per rank
    # per rank, highest memory per compute window, and the measured schedule's alive units
    # per window (overlapscope/sim/memory.py); empty where the trace has no memory events
    mem_window_bytes: dict[int, dict[WindowKey, int]]
    measured_window_units: tuple[tuple[WindowKey, int], ...]
    peer_skew_us: float  # mean lag of the last rank to start a collective
    measured: Measured
    run_meta: dict[str, object]


# --------------------------------------------------------------------------- helpers


def _scenario_from_config(cfg: dict[str, object]) -> Scenario:
    eng = cfg.get("engine")
    if not isinstance(eng, dict):
        raise UserError("run.json has no config.engine: not an overlapscope run")
    limit = eng.get("limit_all_gathers")
    return Scenario(
        policy=Policy(str(eng.get("policy", "none"))),
        forward_prefetch=bool(eng.get("forward_prefetch", False)),
        limit_all_gathers=int(limit) if isinstance(limit, int) else None,
    )


def _overlap_with(starts: np.ndarray, ends: np.ndarray, busy: pd.DataFrame) -> np.ndarray:
    """For each [start, end), the time it overlaps the union of ``busy`` intervals."""
    iv = sorted(zip(busy["start_us"].to_numpy(), busy["end_us"].to_numpy(), strict=True))
    merged: list[list[float]] = []
    for s, e in iv:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    if not merged:
        return np.zeros(len(starts))
    m = np.asarray(merged)
    lo = np.maximum(starts[:, None], m[None, :, 0])
    hi = np.minimum(ends[:, None], m[None, :, 1])
    return np.clip(hi - lo, 0, None).sum(axis=1)


def _compute_rows(a: RunAnalysis, counted: pd.DataFrame) -> pd.DataFrame:
    tl = a.timeline.merge(counted, on=["rank", "step"])
    comp = tl[(tl["lane"] == "compute")].copy()
    if comp.empty:
        raise UserError(
            "the run has no ovs/<phase>/<unit> compute ranges: record it with overlapscope "
            "run (not --no-instrument)"
        )
    comp["phase"] = comp["phase"].astype(str)
    comp["unit"] = comp["unit"].astype(str)
    comm = tl[tl["lane"] == "comm"]
    over = np.zeros(len(comp))
    for r in comp["rank"].unique():
        sel = (comp["rank"] == r).to_numpy()
        over[sel] = _overlap_with(
            comp.loc[sel, "start_us"].to_numpy(),
            comp.loc[sel, "end_us"].to_numpy(),
            comm[comm["rank"] == r],
        )
    comp["busy_frac"] = np.where(comp["dur_us"] > 0, over / comp["dur_us"].clip(lower=1e-9), 0.0)
    comp = comp.sort_values(["rank", "step", "start_us"])
    comp["piece"] = comp.groupby(["rank", "step", "phase", "unit"]).cumcount()
    return comp


def _fit_contention(comp: pd.DataFrame, unit_bytes: dict[str, int]) -> float:
    """Common slow-down α in ``dur = base × (1 + α × busy_frac)`` over same-size units."""
    rows = comp[comp["unit"].isin([u for u in unit_bytes if u != ROOT_UNIT])]
    rows = rows[rows["phase"].isin(["fwd", "bwd"])].copy()
    if len(rows) < 4:
        return 0.0
    rows["size"] = rows["unit"].map(unit_bytes)
    g = rows.groupby(["phase", "size"])
    mean_d = g["dur_us"].transform("mean")
    mean_f = g["busy_frac"].transform("mean")
    dev = (rows["busy_frac"] - mean_f).to_numpy()
    if float(dev.std()) < MIN_BUSY_SPREAD:
        return 0.0  # every unit equally busy: α cannot be told from the base duration
    # Within a group, dur - mean(dur) = base × α × (busy - mean(busy)), with
    # base = mean(dur) / (1 + α × mean(busy)): least squares for α with base from the
    # previous α, repeated to the fixed point (from α = 0 the first step under-fits by
    # 1 / (1 + α × mean(busy))).
    y = (rows["dur_us"] - mean_d).to_numpy()
    d, f = mean_d.to_numpy(), mean_f.to_numpy()
    alpha = 0.0
    for _ in range(50):
        x = d / (1 + alpha * f) * dev
        new = float(np.clip((x * y).sum() / float((x * x).sum()), 0.0, MAX_CONTENTION))
        if abs(new - alpha) < 1e-9:
            break
        alpha = new
    return new


def _rank_times(
    comp: pd.DataFrame, contention: float, units: tuple[str, ...], num_steps: int
) -> dict[int, dict[tuple[Phase, str, int], float]]:
    comp = comp.assign(base_us=comp["dur_us"] / (1 + contention * comp["busy_frac"]))
    n_root = len(units) + 1
    out: dict[int, dict[tuple[Phase, str, int], float]] = {}
    for r, rows in comp.groupby("rank"):
        times: dict[tuple[Phase, str, int], float] = {}
        for (phase, unit), g in rows.groupby(["phase", "unit"]):
            per_step = g.groupby("step")
            if unit == ROOT_UNIT and phase in ("fwd", "bwd"):
                counts = per_step.size()
                if (counts == n_root).all():
                    pieces = g.groupby("piece")["base_us"].sum() / num_steps
                else:  # unexpected structure: all of it before the units
                    pieces = pd.Series({0: g["base_us"].sum() / num_steps})
            else:
                pieces = pd.Series({0: g["base_us"].sum() / num_steps})
            for piece, us in pieces.items():
                times[(Phase(phase), str(unit), int(piece))] = float(us)
        out[int(r)] = times
    return out


def _dispatch_us(ev: pd.DataFrame) -> float:
    """Mean time from "every rank issued it and every queue is free" to "the last rank's
    op started" (the backend thread's pick-up latency), over the run's collectives.

    "Issued" is the end of the issue range, as in the replay. On the engine's gloo runs the
    op usually starts before that range ends, so this comes out 0: the replay then starts each
    collective when its issue range ends, a little later than measured, which the
    self-replay error (docs/WHATIF.md) includes.

    The k-th communication op of a rank belongs to its k-th issue range (one queue, issue
    order); collectives are matched across ranks by that position within the step.
    """
    cols = ["rank", "step", "ts_us", "end_us"]
    comm = ev.loc[ev["lane"] == "comm", cols].sort_values(["rank", "ts_us"])
    issue = ev.loc[ev["lane"] == "issue", cols].sort_values(["rank", "ts_us"])
    if comm.empty or len(comm) != len(issue):
        return 0.0
    comm = comm.assign(
        k=comm.groupby(["rank", "step"]).cumcount().to_numpy(),
        prev_end=comm.groupby(["rank", "step"])["end_us"].shift(1).to_numpy(),
        issued=issue["end_us"].to_numpy(),
    )
    comm["ready"] = comm[["prev_end", "issued"]].max(axis=1)
    g = comm.groupby(["step", "k"])
    lag = (g["ts_us"].max() - g["ready"].max()).clip(lower=0)
    return float(lag.mean()) if len(lag) else 0.0


def _lane_time_us(coll: pd.DataFrame) -> pd.Series:
    """How long each collective held its group's queue: from the last rank's start to the
    last rank's end.

    The analysis' ``transfer_us`` is the fastest rank's duration (right for bandwidth).
    The replay needs more: a collective is done, and the next one on the queue can start,
    only when every rank has finished it, and ranks finish apart (over the 1,344
    collectives of the what-if validation's 24 runs, the span exceeds the fastest
    duration by 0.4 ms median, 1.4 ms mean, 3.9 ms at the 90th percentile). With the
    fastest duration the replay of each run under its own configuration came out 1.3-5.4%
    short; with the span, 3.1% short to 1.0% long (docs/BENCHMARKS.md, what-if). Falls
    back to the fastest duration where the span is not positive (one rank seen)."""
    last_start = coll["start_us"] + coll["straggler_lag_us"].fillna(0.0)
    span = coll["end_us"] - last_start
    return span.where(span > 0, coll["transfer_us"])


def _per_collective(
    coll: pd.DataFrame, column: str = "transfer_us", *, keep_zero: bool = False
) -> dict[tuple[str, Phase], float]:
    """Mean of ``column`` per (unit, phase); non-positive means dropped unless ``keep_zero``
    (a lag of 0 is a measurement; a lane time of 0 is not)."""
    mean = coll.groupby(["unit", "phase"])[column].mean()
    return {
        (str(u), Phase(str(ph))): float(t)
        for (u, ph), t in mean.items()
        if t > 0 or (keep_zero and t == 0)
    }


MIN_SIZE_SPAN = 4.0  # fit a latency only over message sizes spanning at least this factor


def _fit_link(kind: str, rows: pd.DataFrame, world_size: int) -> LinkModel:
    f = bus_factor(kind, world_size)
    rows = rows[(rows["bytes"] > 0) & (rows["transfer_us"] > 0)]
    if rows.empty:
        raise UserError(f"no measured {kind} collectives with sizes to fit a link model")
    x = rows["bytes"].to_numpy(dtype=float) * f
    y = rows["transfer_us"].to_numpy(dtype=float)
    # Through the origin (keeps the total measured time) unless the sizes span enough to
    # tell a fixed cost from a per-byte one: an FSDP run has one or two unit sizes, whose
    # noisy times can fit any intercept (2.2 and 3.2 MB gave 0-5 ms and 1.0-2.2 Gbit/s
    # on one 1 Gbit/s link), and a wrong intercept is multiplied when the rate is scaled.
    latency, inv_bw = 0.0, float(y.sum() / x.sum())
    if x.max() >= MIN_SIZE_SPAN * x.min():
        slope, icpt = np.polyfit(x, y, 1)
        if slope > 0 and 0 <= icpt < y.min():
            latency, inv_bw = float(icpt), float(slope)
    return LinkModel(kind, latency, 1.0 / inv_bw, f, len(rows))


# --------------------------------------------------------------------------- public


def calibrate(traces: RunTraces, a: RunAnalysis) -> Calibration:
    """Build the model of one overlapscope run (CPU/gloo or CUDA/NCCL, ``full_shard``)."""
    meta = traces.run_meta
    if meta is None or "units" not in meta or "config" not in meta:
        raise UserError(
            f"{traces.sources[0] if traces.sources else 'run'}: no overlapscope run.json with "
            "units: what-if needs a run directory written by `overlapscope run`"
        )
    cfg = meta["config"]
    sharding = cfg["engine"].get("sharding", "full_shard")
    if sharding != "full_shard":
        where = traces.sources[0].parent if traces.sources else "run"
        raise UserError(
            f"{where}: a {sharding} run; what-if models full_shard runs only: record one "
            "with --sharding full_shard"
        )
    units_all = {u["name"]: u for u in meta["units"]}
    units = tuple(n for n in units_all if n != ROOT_UNIT)
    full = {n: int(u["full_bytes"]) for n, u in units_all.items()}
    shard = {n: int(u["shard_bytes"]) for n, u in units_all.items()}
    if ROOT_UNIT not in full:
        full[ROOT_UNIT] = shard[ROOT_UNIT] = 0
    world = int(traces.world_size)
    counted = pd.DataFrame(
        [(r, s) for r, steps in a.counted_steps.items() for s in steps], columns=["rank", "step"]
    )
    num_steps = int(counted.groupby("rank").size().min())

    # collectives: bytes per (unit, phase), link models per kind
    coll = a.collectives.merge(counted.drop_duplicates("step")[["step"]], on="step")
    coll = coll.assign(unit=coll["unit"].astype(str), phase=coll["phase"].astype(str))
    if coll.empty:
        raise UserError("the run has no matched collectives across ranks to calibrate the link")
    lane = _lane_time_us(coll)
    lag = (lane - coll["transfer_us"]).clip(lower=0.0)
    wire = coll  # the fastest rank's duration: what the link's bandwidth shows
    coll = coll.assign(transfer_us=lane, lag_us=lag)
    rs_rows = coll[coll["phase"] == "rs"]
    reduce_kind = str(rs_rows["kind"].mode().iloc[0]) if len(rs_rows) else "reduce_scatter"
    links = {
        str(k): _fit_link(str(k), g, world)
        for k, g in wire.groupby(wire["kind"].astype(str))
        if str(k) in ("all_gather", "all_reduce", "reduce_scatter")
    }
    ag_bytes = dict(full)
    reduce_bytes = dict(full)  # gloo: all-reduce of the full gradient; nccl: input = full
    for (u, ph), b in coll.groupby(["unit", "phase"])["bytes"].max().items():
        if ph in ("ag_fwd", "ag_bwd") and b > 0:
            ag_bytes[str(u)] = int(b)
        elif ph == "rs" and b > 0:
            reduce_bytes[str(u)] = int(b)
    model = StepModel(units, ag_bytes, reduce_bytes, reduce_kind)
    transfer = _per_collective(coll)
    step_numbers = sorted(a.counted_steps[min(a.counted_steps)])
    step_transfer = tuple(_per_collective(coll[coll["step"] == s]) for s in step_numbers)
    step_lag = tuple(
        _per_collective(coll[coll["step"] == s], "lag_us", keep_zero=True) for s in step_numbers
    )

    # compute, contention, issue costs, per-step overhead
    comp = _compute_rows(a, counted)
    contention = _fit_contention(comp, full)
    compute = _rank_times(comp, contention, units, num_steps)
    step_compute = tuple(
        _rank_times(comp[comp["step"] == s], contention, units, 1) for s in step_numbers
    )
    ev = traces.events.merge(counted, on=["rank", "step"])
    issue = ev[ev["lane"] == "issue"]
    steps = a.steps.merge(counted, on=["rank", "step"])
    measured_program = build_program(model, _scenario_from_config(cfg))
    num_compute_ops = sum(op.kind is OpKind.COMPUTE for op in measured_program.ops)
    ranks: dict[int, RankTimes] = {}
    for r in sorted(compute):
        iss = issue[issue["rank"] == r]
        issue_us = {
            Phase(str(p)): float(g.mean()) for p, g in iss.groupby("phase", observed=True)["dur_us"]
        }
        st = steps[steps["rank"] == r]
        outside = st["step_time_us"] - st["compute_us"] - st["nccl_wait_us"] - st["limiter_us"]
        overhead = float(outside.mean()) - float(iss["dur_us"].sum()) / num_steps
        ranks[r] = RankTimes(compute[r], issue_us, gap_us=max(overhead, 0.0) / num_compute_ops)

    # memory
    alive_bytes = max((full[u] for u in units), default=0)
    peaks = [int(v) for v in meta.get("peak_mem_bytes", [])]
    alive_bwd = [int(v) for v in meta.get("max_alive_in_backward", [])]
    mem_units = measured_program.max_mem_units_in_backward
    baseline = {r: float(p - mem_units * alive_bytes) for r, p in enumerate(peaks)}
    # the memory curve per compute window (CPU runs: the profiler's [memory] events)
    windows = (
        {}
        if traces.has_gpu
        else {info.rank: window_peaks(info.path) for info in traces.ranks if info.rank < len(peaks)}
    )

    rk = a.ranks
    measured = Measured(
        scenario=_scenario_from_config(cfg),
        link_gbit=None if cfg.get("link_gbit") is None else float(cfg["link_gbit"]),
        step_time_us=float(rk["step_time_per_step_us"].mean()),
        exposed_comm_us=float(rk["exposed_comm_per_step_us"].mean()),
        nccl_wait_us=float(rk["nccl_wait_per_step_us"].mean()),
        peak_mem_bytes=max(peaks, default=0),
        max_alive_units=max((int(v) for v in meta.get("max_alive_units", [])), default=0),
        max_alive_in_backward=max(alive_bwd, default=0),
    )
    skew = float(coll["straggler_lag_us"].mean()) if len(coll) else 0.0
    return Calibration(
        source=str(traces.sources[0].parent if traces.sources else ""),
        world_size=world,
        backend=str(meta.get("backend", "")),
        step_model=model,
        ranks=ranks,
        links=links,
        transfer_us=transfer,
        step_compute_us=step_compute,
        step_transfer_us=step_transfer,
        step_lag_us=step_lag,
        dispatch_us=_dispatch_us(ev),
        contention=contention,
        unit_full_bytes=full,
        unit_shard_bytes=shard,
        alive_unit_bytes=alive_bytes,
        mem_baseline_bytes=baseline,
        mem_peak_bytes=dict(enumerate(peaks)),
        mem_window_bytes={r: w for r, w in windows.items() if w},
        measured_window_units=measured_program.window_units,
        peer_skew_us=skew,
        measured=measured,
        run_meta=meta,
    )
