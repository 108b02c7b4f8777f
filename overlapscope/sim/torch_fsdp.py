"""What-if from a torch FSDP1 / FSDP2 trace (no ``run.json``, no ``ovs/`` ranges).

The analysis names each collective's unit and phase (``ag_fwd``, ``ag_bwd``, ``rs``) from
torch's own ranges; from those this module gets what ``overlapscope run`` would have written:

- the units in forward order and their gathered / reduced bytes (:func:`step_shape`);
- the configuration the run had, as the schedule whose collectives come in the measured
  order (:func:`infer_scenario`: torch FSDP1 ``BACKWARD_PRE`` and FSDP2's default implicit
  prefetch both issue the next unit's all-gather before the current unit's gradient
  compute, as the engine's ``backward_pre`` does);
- compute per unit and phase (:func:`attribute_compute`). The analysis does not yet give
  torch compute a unit; until it does, compute is assigned by time windows between the
  measured collectives: the compute between collective k and k+1 belongs to the compute op
  that the measured schedule runs between issuing them. Swap this one function for the
  analysis' attribution when it exists.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from overlapscope.analysis.intervals import covered, union
from overlapscope.engine.config import Policy
from overlapscope.errors import UserError
from overlapscope.sim.schedule import OpKind, Program, Scenario, StepModel, build_program
from overlapscope.trace.names import OPTIM_UNIT, ROOT_UNIT

COMPUTE_COLUMNS = ["rank", "step", "phase", "unit", "piece", "start_us", "end_us", "dur_us"]


def _first_step(coll: pd.DataFrame) -> pd.DataFrame:
    return coll[coll["step"] == coll["step"].min()].sort_values("seq")


def step_shape(coll: pd.DataFrame) -> StepModel:
    """Units in forward order (their forward all-gathers' order) and their bytes."""
    first = _first_step(coll)
    fwd = first[first["phase"] == "ag_fwd"]
    units = tuple(dict.fromkeys(fwd["unit"].astype(str)))
    if not units:
        raise UserError("no forward all-gathers with a unit: not an FSDP full_shard run")
    ag = coll[coll["phase"].isin(["ag_fwd", "ag_bwd"])].groupby("unit")["bytes"].max()
    rs = coll[coll["phase"] == "rs"]
    red = rs.groupby("unit")["bytes"].max()
    kind = str(rs["kind"].astype(str).mode().iloc[0]) if len(rs) else "reduce_scatter"
    ag_bytes = {u: int(ag.get(u, 0)) for u in units} | {ROOT_UNIT: 0}
    reduce_bytes = {u: int(red.get(u, 0)) for u in units} | {ROOT_UNIT: 0}
    return StepModel(units, ag_bytes, reduce_bytes, kind, blocking=True)


def infer_scenario(coll: pd.DataFrame, model: StepModel) -> Scenario:
    """The engine schedule whose collectives come in the run's measured order."""
    first = _first_step(coll)
    measured = list(zip(first["phase"].astype(str), first["unit"].astype(str), strict=True))
    for policy, fwd, depth in itertools.product(
        [Policy.BACKWARD_PRE, Policy.BACKWARD_POST, Policy.NONE], [False, True], [1, 2, 3]
    ):
        if policy is Policy.NONE and depth > 1:
            continue
        s = Scenario(policy, forward_prefetch=fwd, prefetch_depth=depth)
        order = [(c.phase.value, c.unit) for c in build_program(model, s).collectives]
        if order == measured:
            return s
    shown = ", ".join(f"{p}:{u}" for p, u in measured[:8])
    raise UserError(
        f"the run's collectives ({shown}{', ...' if len(measured) > 8 else ''}) come in an "
        "order no prefetch policy of the what-if model issues (a prefetch depth above 3, "
        "a limiter, or another schedule): what-if cannot calibrate it"
    )


def _targets(program: Program) -> dict[int, tuple[str, str, int]]:
    """Gap g (compute between issuing collective g-1 and g) -> the compute op it feeds:
    the unit's own compute where the gap has one, else the gap's last op."""
    gaps: dict[int, list[tuple[str, str, int]]] = {}
    issued = 0
    for op in program.ops:
        if op.kind is OpKind.ISSUE:
            issued += 1
        elif op.kind is OpKind.COMPUTE:
            gaps.setdefault(issued, []).append((op.phase.value, op.unit, op.piece))
    out = {}
    for g, ops in gaps.items():
        own = [o for o in ops if o[1] not in (ROOT_UNIT, OPTIM_UNIT)]
        out[g] = own[0] if own else ops[-1]
    return out


def attribute_compute(
    timeline: pd.DataFrame, steps: pd.DataFrame, program: Program
) -> pd.DataFrame:
    """Compute per (rank, step, compute op) by the windows between the measured collectives
    (the rank's compute rows, unioned so nested CPU ops count once)."""
    targets = _targets(program)
    num = len(program.collectives)
    rows = []
    for (rank, step), st in steps.groupby(["rank", "step"]):
        tl = timeline[(timeline["rank"] == rank) & (timeline["step"] == step)]
        comm = tl[tl["lane"] == "comm"].sort_values("start_us")
        if len(comm) != num:
            raise UserError(
                f"rank {rank} step {step}: {len(comm)} collectives where the schedule has "
                f"{num}: what-if needs every step to run the same collectives"
            )
        bounds = np.concatenate(
            [[float(st["start_us"].iloc[0])], comm["start_us"].to_numpy(), [float(st["end_us"].iloc[0])]]
        )  # fmt: skip
        comp = tl[tl["lane"] == "compute"]
        busy = union(comp["start_us"].to_numpy(), comp["end_us"].to_numpy())
        per_gap = covered(busy, bounds[:-1], bounds[1:])
        for g, (phase, unit, piece) in targets.items():
            rows.append((rank, step, phase, unit, piece, bounds[g], bounds[g + 1], per_gap[g]))
    return pd.DataFrame(rows, columns=COMPUTE_COLUMNS).assign(busy_frac=0.0)
