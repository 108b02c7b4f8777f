"""The run's facts for calibration: what ``run.json`` says (overlapscope runs) or what the
trace shows (torch FSDP runs: overlapscope/sim/torch_fsdp.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from overlapscope.analysis import RunAnalysis
from overlapscope.config import EngineConfig, Sharding
from overlapscope.errors import UserError
from overlapscope.manifest import RUN_JSON, RunManifest
from overlapscope.phases import CollectiveKind, Phase, issuing, values
from overlapscope.sim.schedule import Scenario, StepModel, build_program
from overlapscope.sim.torch_fsdp import infer_scenario, step_shape
from overlapscope.trace.naming.ranges import ROOT_UNIT
from overlapscope.trace.producers import producers

ALL_GATHER, REDUCE_SCATTER = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER


@dataclass(frozen=True, slots=True)
class Facts:
    """What ``run.json`` says (overlapscope runs) or the trace shows (torch FSDP runs)."""

    framework: str
    model: StepModel
    scenario: Scenario
    full_bytes: dict[str, int]
    link_gbit: float | None
    backend: str
    peaks: list[int]
    max_alive_units: int
    max_alive_in_backward: int


def scenario_from_engine(engine: EngineConfig) -> Scenario:
    """The what-if scenario a run of this engine configuration is."""
    return Scenario(
        policy=engine.policy,
        forward_prefetch=engine.forward_prefetch,
        limit_all_gathers=engine.limit_all_gathers,
    )


def _model_bytes(coll: pd.DataFrame, full: dict[str, int]) -> tuple[dict[str, int], dict[str, int], str]:  # fmt: skip
    rs_rows = coll[coll["phase"].isin(values(issuing(REDUCE_SCATTER)))]
    reduce_kind = str(rs_rows["kind"].mode().iloc[0]) if len(rs_rows) else REDUCE_SCATTER.value
    ag_bytes = dict(full)
    reduce_bytes = dict(full)  # gloo: all-reduce of the full gradient; nccl: input = full
    for (u, ph), b in coll.groupby(["unit", "phase"])["bytes"].max().items():
        kind = Phase(ph).collective_kind
        if kind is ALL_GATHER and b > 0:
            ag_bytes[str(u)] = int(b)
        elif kind is REDUCE_SCATTER and b > 0:
            reduce_bytes[str(u)] = int(b)
    return ag_bytes, reduce_bytes, reduce_kind


def ovs_facts(manifest: RunManifest, coll: pd.DataFrame, where: str) -> Facts:
    """The run's facts from its run.json (an engine run: it lists its units and config)."""
    engine, units_all = manifest.engine, manifest.units
    if engine is None or units_all is None:
        raise UserError(
            f"{where}/{RUN_JSON}: no config.engine or units: not a run of overlapscope's engine; "
            "repair it from the run's copy, or run `overlapscope run` again"
        )
    if engine.sharding is not Sharding.FULL_SHARD:
        raise UserError(
            f"{where}: a {engine.sharding.value} run; what-if models full_shard runs only: "
            "record one with --sharding full_shard"
        )
    units = tuple(u.name for u in units_all if u.name != ROOT_UNIT)
    full = {u.name: u.full_bytes for u in units_all}
    full.setdefault(ROOT_UNIT, 0)
    ag, red, kind = _model_bytes(coll, full)
    return Facts(
        framework="overlapscope",
        model=StepModel(units, ag, red, kind),
        scenario=scenario_from_engine(engine),
        full_bytes=full,
        link_gbit=manifest.link_gbit,
        backend=manifest.backend or "",
        peaks=list(manifest.peak_mem_bytes),
        max_alive_units=max(manifest.max_alive_units, default=0),
        max_alive_in_backward=max(manifest.max_alive_in_backward, default=0),
    )


def fsdp_framework(a: RunAnalysis) -> str:
    """The torch FSDP producer the run's traces show (one whose schedule the what-if infers,
    producers' ``infers_schedule``); one line if they show none."""
    inferred = set(a.summary.frameworks.values()) & {
        p.name for p in producers() if p.infers_schedule
    }
    if not inferred:
        raise UserError(
            "neither an overlapscope run (no run.json) nor a torch FSDP trace: what-if needs "
            "a run written by `overlapscope run` or the traces of a torch FSDP1/FSDP2 run"
        )
    return sorted(inferred)[0]


def torch_facts(a: RunAnalysis, coll: pd.DataFrame, places: list[int] | None = None) -> Facts:
    """A torch FSDP run's facts from its collectives: on CPU the matched gloo collectives;
    on GPU the host's calls, with where each was issued among the units' compute
    (``places``, sim/torch_cuts.py)."""
    gpu = places is not None
    framework = fsdp_framework(a)
    model = step_shape(coll, blocking=not gpu)
    scenario = infer_scenario(coll, model, places)
    program = build_program(model, scenario)
    return Facts(
        framework=framework,
        model=model,
        scenario=scenario,
        full_bytes=dict(model.ag_bytes),
        link_gbit=None,
        backend="nccl" if gpu else "gloo",
        peaks=[],
        max_alive_units=program.max_alive_units,
        max_alive_in_backward=program.max_alive_in_backward,
    )
