"""The run's facts for calibration: what ``run.json`` says (overlapscope runs) or what the
trace shows (torch FSDP runs: overlapscope/sim/torch_fsdp.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from overlapscope.analysis import RunAnalysis
from overlapscope.engine.config import Policy
from overlapscope.errors import UserError
from overlapscope.sim.schedule import Scenario, StepModel, build_program
from overlapscope.sim.torch_fsdp import infer_scenario, step_shape
from overlapscope.trace.names import ROOT_UNIT


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


def scenario_from_config(cfg: dict[str, object]) -> Scenario:
    eng = cfg.get("engine")
    if not isinstance(eng, dict):
        raise UserError("run.json has no config.engine: not an overlapscope run")
    limit = eng.get("limit_all_gathers")
    return Scenario(
        policy=Policy(str(eng.get("policy", "none"))),
        forward_prefetch=bool(eng.get("forward_prefetch", False)),
        limit_all_gathers=int(limit) if isinstance(limit, int) else None,
    )


def _model_bytes(coll: pd.DataFrame, full: dict[str, int]) -> tuple[dict[str, int], dict[str, int], str]:  # fmt: skip
    rs_rows = coll[coll["phase"] == "rs"]
    reduce_kind = str(rs_rows["kind"].mode().iloc[0]) if len(rs_rows) else "reduce_scatter"
    ag_bytes = dict(full)
    reduce_bytes = dict(full)  # gloo: all-reduce of the full gradient; nccl: input = full
    for (u, ph), b in coll.groupby(["unit", "phase"])["bytes"].max().items():
        if ph in ("ag_fwd", "ag_bwd") and b > 0:
            ag_bytes[str(u)] = int(b)
        elif ph == "rs" and b > 0:
            reduce_bytes[str(u)] = int(b)
    return ag_bytes, reduce_bytes, reduce_kind


def ovs_facts(meta: dict[str, Any], coll: pd.DataFrame, where: str) -> Facts:
    """The run's facts from its run.json; a field missing or of the wrong type (a damaged
    manifest: the loader checks only what the analysis reads) is one line naming it."""
    try:
        return _ovs_facts(meta, coll, where)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise UserError(
            f"{where}/run.json: a field what-if reads is missing or of the wrong type ({e!r}); "
            "repair it from the run's copy, or run `overlapscope run` again"
        ) from None


def _ovs_facts(meta: dict[str, Any], coll: pd.DataFrame, where: str) -> Facts:
    cfg = meta["config"]
    sharding = cfg["engine"].get("sharding", "full_shard")
    if sharding != "full_shard":
        raise UserError(
            f"{where}: a {sharding} run; what-if models full_shard runs only: record one "
            "with --sharding full_shard"
        )
    units_all = {u["name"]: u for u in meta["units"]}
    units = tuple(n for n in units_all if n != ROOT_UNIT)
    full = {n: int(u["full_bytes"]) for n, u in units_all.items()}
    full.setdefault(ROOT_UNIT, 0)
    ag, red, kind = _model_bytes(coll, full)
    link = cfg.get("link_gbit")
    return Facts(
        framework="overlapscope",
        model=StepModel(units, ag, red, kind),
        scenario=scenario_from_config(cfg),
        full_bytes=full,
        link_gbit=None if link is None else float(link),
        backend=str(meta.get("backend", "")),
        peaks=[int(v) for v in meta.get("peak_mem_bytes", [])],
        max_alive_units=max((int(v) for v in meta.get("max_alive_units", [])), default=0),
        max_alive_in_backward=max(
            (int(v) for v in meta.get("max_alive_in_backward", [])), default=0
        ),
    )


def torch_facts(a: RunAnalysis, coll: pd.DataFrame) -> Facts:
    frameworks = set(a.summary.frameworks.values())
    if not frameworks & {"fsdp1", "fsdp2"}:
        raise UserError(
            "neither an overlapscope run (no run.json) nor a torch FSDP trace: what-if needs "
            "a run written by `overlapscope run` or the traces of a torch FSDP1/FSDP2 run"
        )
    if a.summary.has_gpu:
        raise UserError(
            "a torch FSDP GPU trace: what-if calibrates torch FSDP from CPU (gloo) traces only "
            "so far; record with `overlapscope run` for a GPU what-if"
        )
    model = step_shape(coll)
    scenario = infer_scenario(coll, model)
    program = build_program(model, scenario)
    return Facts(
        framework=sorted(frameworks & {"fsdp1", "fsdp2"})[0],
        model=model,
        scenario=scenario,
        full_bytes=dict(model.ag_bytes),
        link_gbit=None,
        backend="gloo",
        peaks=[],
        max_alive_units=program.max_alive_units,
        max_alive_in_backward=program.max_alive_in_backward,
    )
