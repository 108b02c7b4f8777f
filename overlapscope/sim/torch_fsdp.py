"""What-if from a torch FSDP1 / FSDP2 trace (no ``run.json``, no ``ovs/`` ranges).

The analysis names each collective's unit and phase (``ag_fwd``, ``ag_bwd``, ``rs``) from
torch's own ranges; from those this module gets what ``overlapscope run`` would have written:

- the units in forward order and their gathered / reduced bytes (:func:`step_shape`);
- the configuration the run had, as the schedule whose collectives come in the measured
  order (:func:`infer_scenario`: torch FSDP1 ``BACKWARD_PRE`` and FSDP2's default implicit
  prefetch both issue the next unit's all-gather before the current unit's gradient
  compute, as the engine's ``backward_pre`` does);
- compute per unit and phase (:func:`attribute_compute`): a unit's forward and gradient
  compute as the analysis attributes it from torch's hook ranges; the compute outside every
  unit (embedding, loss, optimizer: the root's pieces) by where it runs, between the
  measured collectives and the units' own compute.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.analysis.intervals import Intervals, covered, subtract, union, union_of
from overlapscope.config import Policy
from overlapscope.errors import UserError
from overlapscope.phases import CollectiveKind, Phase, issuing, values
from overlapscope.sim.schedule import OpKind, Program, Scenario, StepModel, build_program
from overlapscope.trace.naming.ranges import OPTIM_UNIT, ROOT_UNIT

ALL_GATHER, REDUCE_SCATTER = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER

COMPUTE_COLUMNS = ["rank", "step", "phase", "unit", "piece", "start_us", "end_us", "dur_us"]


def _first_step(coll: pd.DataFrame) -> pd.DataFrame:
    return coll[coll["step"] == coll["step"].min()].sort_values("seq")


def step_shape(coll: pd.DataFrame, *, blocking: bool = True) -> StepModel:
    """Units in forward order (their forward all-gathers' order) and their bytes. A unit
    named ``root`` (FSDP2's root module with parameters of its own) is the schedule's root.
    ``blocking``: the collectives block their thread (gloo on CPU), not the device's."""
    first = _first_step(coll)
    fwd = first[first["phase"] == Phase.AG_FWD.value]
    units = tuple(u for u in dict.fromkeys(fwd["unit"].astype(str)) if u != ROOT_UNIT)
    if not units:
        raise UserError("no forward all-gathers with a unit: not an FSDP full_shard run")
    ag = coll[coll["phase"].isin(values(issuing(ALL_GATHER)))].groupby("unit")["bytes"].max()
    rs = coll[coll["phase"].isin(values(issuing(REDUCE_SCATTER)))]
    red = rs.groupby("unit")["bytes"].max()
    kind = str(rs["kind"].astype(str).mode().iloc[0]) if len(rs) else REDUCE_SCATTER.value
    every = (*units, ROOT_UNIT)
    ag_bytes = {u: max(int(ag.get(u, 0)), 0) for u in every}
    reduce_bytes = {u: max(int(red.get(u, 0)), 0) for u in every}
    return StepModel(units, ag_bytes, reduce_bytes, kind, blocking=blocking)


def infer_scenario(
    coll: pd.DataFrame, model: StepModel, places: list[int] | None = None
) -> Scenario:
    """The engine schedule whose collectives come in the run's measured order. Orders alone
    do not tell ``backward_pre`` from ``backward_post``, nor forward prefetch (they move an
    issue past compute, not past another issue): ``places``, where the trace shows it (GPU:
    how many units' compute the host had begun before each collective), picks the schedule
    that issues each collective after as many; without it the first in order."""
    first = _first_step(coll)
    measured = list(zip(first["phase"].astype(str), first["unit"].astype(str), strict=True))
    found: list[tuple[int, Scenario]] = []
    for policy, fwd, depth in itertools.product(
        [Policy.BACKWARD_PRE, Policy.BACKWARD_POST, Policy.NONE], [False, True], [1, 2, 3]
    ):
        if policy is Policy.NONE and depth > 1:
            continue
        s = Scenario(policy, forward_prefetch=fwd, prefetch_depth=depth)
        program = build_program(model, s)
        order = [(c.phase.value, c.unit) for c in program.collectives]
        if order == measured:
            if places is None:
                return s
            off = sum(a != b for a, b in zip(issue_places(program), places, strict=True))
            found.append((off, s))
    if found:
        return min(found, key=lambda x: x[0])[1]  # (ties: the first in order)
    shown = ", ".join(f"{p}:{u}" for p, u in measured[:8])
    raise UserError(
        f"the run's collectives ({shown}{', ...' if len(measured) > 8 else ''}) come in an "
        "order no prefetch policy of the what-if model issues (a prefetch depth above 3, "
        "a limiter, or another schedule): what-if cannot calibrate it"
    )


def issue_places(program: Program) -> list[int]:
    """Per collective: how many units' compute ops the program runs before issuing it."""
    out, units = [], 0
    for op in program.ops:
        if op.kind is OpKind.COMPUTE and op.unit not in (ROOT_UNIT, OPTIM_UNIT):
            units += 1
        elif op.kind is OpKind.ISSUE:
            out.append(units)
    return out


Op3 = tuple[str, str, int]  # (phase, unit, piece) of a compute op


def _gap_ops(program: Program) -> dict[int, list[Op3]]:
    """Gap g (between issuing collective g-1 and g) -> its compute ops, in program order."""
    gaps: dict[int, list[Op3]] = {}
    issued = 0
    for op in program.ops:
        if op.kind is OpKind.ISSUE:
            issued += 1
        elif op.kind is OpKind.COMPUTE:
            gaps.setdefault(issued, []).append((op.phase.value, op.unit, op.piece))
    return gaps


def _is_unit(op: Op3) -> bool:
    return op[1] not in (ROOT_UNIT, OPTIM_UNIT)


# torch's autograd engine runs every backward node inside a range of this name: the first
# one opens the step's backward, the last one's end closes it (the optimizer follows).
AUTOGRAD_NODE = "autograd::engine::evaluate_function"


@dataclass(frozen=True, slots=True)
class _StepCompute:
    """One rank-step's compute: each unit's (phase, unit) busy time from the analysis'
    attribution, the busy time no unit region holds, and where backward runs."""

    units: dict[tuple[str, str], Intervals]
    free: Intervals
    backward_from_us: float  # nan: no autograd node ranges in the step
    backward_until_us: float

    @staticmethod
    def of(comp: pd.DataFrame) -> _StepCompute:
        own = comp["unit"].notna() & comp["phase"].notna()
        units: dict[tuple[str, str], Intervals] = {}
        for (phase, unit), g in comp[own].groupby(["phase", "unit"], observed=True):
            units[(str(phase), str(unit))] = union(g["start_us"], g["end_us"])
        held = union_of(*units.values()) if units else Intervals.empty()
        rest = comp[~own]
        nodes = comp[comp["name"].astype(str).str.startswith(AUTOGRAD_NODE)]
        return _StepCompute(
            units,
            subtract(union(rest["start_us"], rest["end_us"]), held),
            float(nodes["start_us"].min()) if len(nodes) else float("nan"),
            float(nodes["end_us"].max()) if len(nodes) else float("nan"),
        )

    def cut_us(self, before: Op3, after: Op3) -> float:
        """Where the free time of two adjacent root ops divides: forward | backward at the
        first autograd node, backward | optimizer after the last (nan: not known)."""
        match (Phase(before[0]), Phase(after[0])):
            case (Phase.FWD, Phase.BWD):
                return self.backward_from_us
            case (Phase.BWD, Phase.OPTIM):
                return self.backward_until_us
        return float("nan")


class _Gap:
    """Hands out one gap's free compute, left to right, to the gap's ops."""

    def __init__(self, ops: list[Op3], sc: _StepCompute, lo: float, hi: float) -> None:
        self.sc, self.hi, self.cursor = sc, hi, lo
        self.out: dict[Op3, list[float]] = {op: [lo, hi, 0.0] for op in ops}

    def give(self, op: Op3, until: float, window: bool) -> None:
        """The free time from the cursor to ``until`` (clamped to the gap) to ``op``."""
        until = min(max(until, self.cursor), self.hi)
        self.out[op][2] += float(covered(self.sc.free, [self.cursor], [until])[0])
        if window:
            self.out[op][:2] = [self.cursor, until]
        self.cursor = until


def _split_gap(
    ops: list[Op3], sc: _StepCompute, lo: float, hi: float
) -> list[tuple[Op3, float, float, float]]:
    """(op, start, end, busy µs) for a gap's ops: a unit op gets its attributed compute and
    the free time within its own span (e.g. inside its hooks); the rest of the gap's free
    time goes to the root / optimizer op between the same unit ops (adjacent root ops
    divided where backward begins or ends, else all to the later one), or to the
    neighbouring unit op where the gap has no root op."""
    gap = _Gap(ops, sc, lo, hi)
    root: Op3 | None = None
    last_unit: Op3 | None = None
    for op in ops:
        if not _is_unit(op):
            if root is not None:
                cut = sc.cut_us(root, op)
                gap.give(root, gap.cursor if np.isnan(cut) else cut, window=True)
            root = op
            continue
        busy = sc.units.get((op[0], op[1]), Intervals.empty())
        first = float(busy.starts[0]) if len(busy) else gap.cursor
        gap.give(root or op, first, window=root is not None)
        end = float(busy.ends[-1]) if len(busy) else gap.cursor
        gap.out[op][:2] = [first, end]
        gap.out[op][2] += busy.total
        gap.give(op, end, window=False)
        root, last_unit = None, op
    gap.give(root or last_unit or ops[-1], hi, window=root is not None)
    return [(op, *gap.out[op]) for op in ops]  # type: ignore[misc]


def attribute_compute(
    timeline: pd.DataFrame, steps: pd.DataFrame, program: Program
) -> pd.DataFrame:
    """Compute per (rank, step, compute op): each unit's forward and gradient compute as
    the analysis attributes it (overlapscope/trace/producers/compute_units.py), and the compute
    outside every unit (root, loss, optimizer) by where it runs between the measured
    collectives and the units' compute. Nested CPU ops count once; the rows of a step add
    up to its compute time."""
    gap_ops = _gap_ops(program)
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
        sc = _StepCompute.of(tl[tl["lane"] == "compute"])
        for g, ops in gap_ops.items():
            for (phase, unit, piece), lo, hi, us in _split_gap(ops, sc, bounds[g], bounds[g + 1]):
                rows.append((rank, step, phase, unit, piece, lo, hi, us))
    return pd.DataFrame(rows, columns=COMPUTE_COLUMNS).assign(busy_frac=0.0)
