"""``predict(run_dir, scenario) -> Prediction``: the what-if facade (CLI and dashboard).

Peak memory (per rank, docs/WHATIF.md): the measured memory curve, one window per compute
op, re-stacked with the predicted schedule's alive full units (overlapscope/sim/memory.py);
where the trace has no memory events (GPU runs), the one-window model::

    peak_mem = baseline + max_alive_in_backward × unit_full_bytes
    baseline = measured peak_mem − measured max_alive_in_backward × unit_full_bytes

where ``unit_full_bytes`` is the largest non-root unit's full parameter size."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from overlapscope.analysis import RunAnalysis
from overlapscope.errors import UserError
from overlapscope.manifest import RUN_JSON, read_manifest
from overlapscope.pipeline.plan import Inputs
from overlapscope.pipeline.run import IN_PROCESS, analyse
from overlapscope.sim.across import at_speed
from overlapscope.sim.calibrate import (
    Calibration,
    LinkModel,
    Measured,
    calibrate,
    with_contention,
)
from overlapscope.sim.events import replay_metrics
from overlapscope.sim.gpu_predict import check_gpu, gpu_replays
from overlapscope.sim.inputs import SimInputs, sim_inputs
from overlapscope.sim.memory import predicted_peak
from overlapscope.sim.replay import Replay, replay
from overlapscope.sim.rescale import contention_under, scaled_links, transfer_us
from overlapscope.sim.schedule import Program, Scenario, build_program

# JSON names of the per-step means (one convention for per-step vs total figures)
PER_STEP_NAMES = {
    "step_time_us": "step_time_per_step_us",
    "compute_us": "compute_per_step_us",
    "comm_us": "comm_per_step_us",
    "exposed_comm_us": "exposed_comm_per_step_us",
    "nccl_wait_us": "nccl_wait_per_step_us",
}
PER_RANK_COLUMNS = (
    "rank",
    "step_time_us",
    "compute_us",
    "comm_us",
    "exposed_comm_us",
    "nccl_wait_us",
)


@dataclass(frozen=True, slots=True)
class Prediction:
    scenario: Scenario
    calibration: Calibration
    replays: tuple[Replay, ...]  # one replayed step per measured step
    per_rank: pd.DataFrame  # rank, step_time_us, compute_us, comm_us, exposed_comm_us, ...
    step_time_us: float
    exposed_comm_us: float
    nccl_wait_us: float
    peak_mem_bytes: int
    max_alive_units: int
    max_alive_in_backward: int
    deferred_prefetches: int
    links: dict[str, LinkModel]  # the link models after the scenario's scaling
    contention: float  # the compute slow-down α replayed (the calibration's, on these links)
    speed_scale: float  # the factor on the source's compute (1: the source's own speed)
    forward_scale: float  # and one more on its forward compute (another link rate)

    def table(self, target: Measured | None = None) -> pd.DataFrame:
        """Predicted vs measured: ``metric, measured_source, predicted`` (+ ``measured_target,
        error_pct`` when a measured run of the scenario is given)."""
        m = self.calibration.measured
        rows: list[dict[str, Any]] = []
        for name in ("step_time_us", "exposed_comm_us", "nccl_wait_us", "peak_mem_bytes"):
            row: dict[str, Any] = {
                "metric": name,
                "measured_source": float(getattr(m, name)),
                "predicted": float(getattr(self, name)),
            }
            if target is not None:
                t = float(getattr(target, name))
                row["measured_target"] = t
                row["error_pct"] = 100 * (row["predicted"] - t) / t if t else float("nan")
            rows.append(row)
        return pd.DataFrame(rows)

    def to_json_dict(self) -> dict[str, Any]:
        """The prediction as JSON. Times are per step (mean over the replayed steps and the
        ranks: ``*_per_step_us``), peak memory the largest rank's."""
        c, s = self.calibration, self.scenario
        per_rank = self.per_rank.rename(columns=PER_STEP_NAMES)
        return {
            "source": c.source,
            "source_framework": c.framework,
            "scenario": {
                "label": s.label,
                "policy": s.policy.value,
                "forward_prefetch": s.forward_prefetch,
                "prefetch_depth": s.prefetch_depth,
                "limit_all_gathers": s.limit_all_gathers,
                "link_gbit": s.link_gbit,
                "bandwidth_scale": s.bandwidth_scale,
            },
            "step_time_per_step_us": self.step_time_us,
            "exposed_comm_per_step_us": self.exposed_comm_us,
            "nccl_wait_per_step_us": self.nccl_wait_us,
            "peak_mem_bytes": self.peak_mem_bytes if c.measured.peak_mem_bytes else None,
            "max_alive_units": self.max_alive_units,
            "max_alive_in_backward": self.max_alive_in_backward,
            "deferred_prefetches": self.deferred_prefetches,
            "per_rank": per_rank.to_dict(orient="records"),
            "measured_source": {
                "scenario": c.measured.scenario.label,
                "link_gbit": c.measured.link_gbit,
                "step_time_per_step_us": c.measured.step_time_us,
                "exposed_comm_per_step_us": c.measured.exposed_comm_us,
                "nccl_wait_per_step_us": c.measured.nccl_wait_us,
                "peak_mem_bytes": c.measured.peak_mem_bytes or None,
                "idle_per_step_us": c.measured.idle_us,
            },
            "calibration": {
                "contention": c.contention,
                "contention_on_scenario_links": self.contention,
                "compute_speed_scale": self.speed_scale,
                "forward_speed_scale": self.forward_scale,
                "lag_fixed_us": c.lag_fixed_us,
                "peer_skew_us": c.peer_skew_us,
                "blocking_collectives": c.step_model.blocking,
                "device": None
                if c.device is None
                else {
                    "launch_latency_us": c.device.launch_latency_us,
                    "gathers_follow_compute": c.device.gathers_follow_compute,
                    "host_transfers": len(c.device.host_transfers),
                },
                "links": {
                    k: {
                        "latency_us": v.latency_us,
                        "busbw_gbps": v.busbw_bytes_per_us * 1e6 / 1e9,
                        "num_samples": v.num_samples,
                    }
                    for k, v in self.links.items()
                },
            },
        }


def _peak_mem(calib: Calibration, program: Program, rank: int, baseline: float) -> float:
    """The re-stacked memory curve (overlapscope/sim/memory.py) where the rank's trace has
    one; otherwise baseline + alive full units at the fullest backward compute."""
    windows = calib.mem_window_bytes.get(rank)
    if windows:
        peak = predicted_peak(
            calib.mem_peak_bytes[rank],
            windows,
            calib.measured_window_units,
            program.window_units,
            calib.alive_unit_bytes,
        )
        if peak is not None:
            return float(peak)
    return baseline + program.max_mem_units_in_backward * calib.alive_unit_bytes


def _host_replays(
    calib: Calibration, program: Program, links: dict[str, LinkModel], alpha: float
) -> list[Replay]:
    """One replay of the training thread per measured step (CPU runs, sim/schedule.py)."""
    samples = list(
        zip(calib.step_compute_us, calib.step_transfer_us, calib.step_lag_us, strict=True)
    ) or [({r: t.compute_us for r, t in calib.ranks.items()}, calib.transfer_us, {})]
    replays = []
    for compute, measured, lags in samples:
        ranks = {
            r: dataclasses.replace(t, compute_us=compute.get(r, t.compute_us))
            for r, t in calib.ranks.items()
        }
        transfer = [
            calib.dispatch_us + transfer_us(calib, links, c, measured, lags)
            for c in program.collectives
        ]
        replays.append(replay(program, ranks, transfer, alpha))
    return replays


def predict_from(
    calib: Calibration,
    scenario: Scenario,
    *,
    contention: float | None = None,
    speed_scale: float = 1.0,
    forward_scale: float = 1.0,
) -> Prediction:
    """Replay the calibrated run's steps under ``scenario``, one replay per measured step
    (that step's compute and transfer times), and average them. ``contention``: an α fitted
    elsewhere instead of the run's own; ``speed_scale``: a factor on every base compute
    duration, ``forward_scale`` one more on the forward ones (all three from runs of the same
    workload: overlapscope/sim/across.py)."""
    if calib.device is not None:
        across = contention is not None or (speed_scale, forward_scale) != (1.0, 1.0)
        check_gpu(calib, scenario, across=across)
    program = build_program(calib.step_model, scenario)
    links = scaled_links(calib, scenario)
    if contention is not None and contention != calib.contention:
        calib = with_contention(calib, contention)  # base compute re-derived with this α
    if (speed_scale, forward_scale) != (1.0, 1.0):
        calib = at_speed(calib, speed_scale, forward_scale)
    alpha = contention_under(calib, links)
    replays = (
        _host_replays(calib, program, links, alpha)
        if calib.device is None
        else gpu_replays(
            calib, program, lambda c, measured, lags: transfer_us(calib, links, c, measured, lags)
        )
    )
    # the analysis' own figures of the replayed steps (sim/events.py), mean over steps
    metrics = replay_metrics(replays, calib.world_size)[list(PER_RANK_COLUMNS)]
    per_rank = metrics.groupby("rank", as_index=False).mean()
    mem = {r: _peak_mem(calib, program, r, b) for r, b in calib.mem_baseline_bytes.items()}
    per_rank["peak_mem_bytes"] = per_rank["rank"].map(mem).fillna(0).astype("int64")
    return Prediction(
        scenario=scenario,
        calibration=calib,
        replays=tuple(replays),
        per_rank=per_rank,
        step_time_us=float(per_rank["step_time_us"].mean()),
        exposed_comm_us=float(per_rank["exposed_comm_us"].mean()),
        nccl_wait_us=float(per_rank["nccl_wait_us"].mean()),
        peak_mem_bytes=int(max(mem.values(), default=0)),
        max_alive_units=program.max_alive_units,
        max_alive_in_backward=program.max_alive_in_backward,
        deferred_prefetches=program.deferred_prefetches,
        links=links,
        contention=alpha,
        speed_scale=speed_scale,
        forward_scale=forward_scale,
    )


def load_calibration(
    run_dir: str | Path, on_warning: Callable[[str], None] | None = None
) -> Calibration:
    """Load, analyse and calibrate one run directory: an ``overlapscope run`` or the traces
    of a torch FSDP1/FSDP2 run. ``on_warning`` gets each of the loader's warnings (what was
    left out of the traces), as ``analyze`` prints them."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir) if run_dir.is_dir() else None
    if manifest is not None and manifest.predicted is not None:
        raise UserError(
            f"{run_dir}: this is a what-if prediction, not a measured run; "
            "calibrate from the measured run it was predicted from"
        )
    if (
        manifest is None
        and run_dir.is_dir()
        and not any(p.suffix in (".json", ".gz") for p in run_dir.glob("*"))
    ):
        raise UserError(
            f"{run_dir}: no {RUN_JSON} and no traces; what-if needs a run directory written by "
            "`overlapscope run` or the trace directory of a torch FSDP run"
        )
    # (the one entry point, in this process: the calibration replays the run's events)
    done = analyse(Inputs((run_dir,), progress=False), IN_PROCESS)
    assert done.run is not None  # (the in-process executor keeps the run)
    for w in done.run.warnings:
        if on_warning is not None:
            on_warning(w)
    return calibrate_loaded(done.analysis, sim_inputs(done.run))


def calibrate_loaded(analysis: RunAnalysis, inputs: SimInputs) -> Calibration:
    """Calibrate from a run's analysis and :class:`SimInputs` (the dashboard passes its cached
    ones: the run is parsed once); errors name the run directory."""
    try:
        return calibrate(analysis, inputs)
    except UserError as e:
        msg = str(e)
        where = inputs.source or "run"
        raise UserError(msg if msg.startswith(where) else f"{where}: {msg}") from None


def predict(
    run_dir: str | Path, scenario: Scenario, *, contention: float | None = None
) -> Prediction:
    """Predict ``scenario`` from the measured run in ``run_dir`` (the dashboard's entry)."""
    return predict_from(load_calibration(run_dir), scenario, contention=contention)
