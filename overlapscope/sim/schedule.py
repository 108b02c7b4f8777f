"""The engine's schedule as a program: what the training thread does in one step under a
:class:`Scenario` (the what-if's first stage; :mod:`overlapscope.sim.replay` plays it).

:func:`build_program` runs the engine's own schedule (``engine/schedule.py``: issue on
demand, prefetch points of each policy, forward prefetch, the rate limiter's deferral,
reshard after forward/backward, reduce-scatter waits at the end of backward) hook by hook and
records the training thread's program: ``COMPUTE``, ``ISSUE k`` and ``WAIT k`` ops, plus the
list of collectives in issue order. Which prefetch is held back depends only on the order of
issues and frees on the thread, never on timing, so the program is the same on every rank and
is built once. It also counts alive full-parameter units (peak memory).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from overlapscope.config import Policy
from overlapscope.engine.schedule import Act, Action, Schedule
from overlapscope.phases import CollectiveKind, Phase
from overlapscope.trace.naming.ranges import OPTIM_UNIT, ROOT_UNIT

ROOT = ROOT_UNIT


class OpKind(enum.Enum):
    COMPUTE = "compute"
    ISSUE = "issue"
    WAIT = "wait"


@dataclass(frozen=True, slots=True)
class Scenario:
    """What to predict: the engine configuration and the network."""

    policy: Policy = Policy.NONE
    forward_prefetch: bool = False
    limit_all_gathers: int | None = None
    bandwidth_scale: float = 1.0  # multiplies every link's bus bandwidth
    link_gbit: float | None = None  # a shaped link of this rate (None: the measured network)
    prefetch_depth: int = 1  # units prefetched ahead in backward (torch FSDP2's explicit list)

    def __post_init__(self) -> None:
        if self.limit_all_gathers is not None and self.limit_all_gathers < 1:
            raise ValueError(f"limit_all_gathers {self.limit_all_gathers} must be >= 1")
        if not 0 < self.bandwidth_scale < math.inf:
            raise ValueError(f"bandwidth_scale {self.bandwidth_scale} must be > 0 and finite")
        if self.link_gbit is not None and not 0 < self.link_gbit < math.inf:
            raise ValueError(f"link_gbit {self.link_gbit} must be > 0 and finite")
        if self.prefetch_depth < 1:
            raise ValueError(f"prefetch_depth {self.prefetch_depth} must be >= 1")
        if self.link_gbit is not None and self.bandwidth_scale != 1.0:
            raise ValueError("give link_gbit or bandwidth_scale, not both")

    @property
    def label(self) -> str:
        s = self.policy.value
        if self.prefetch_depth != 1:
            s += f"+depth={self.prefetch_depth}"
        if self.limit_all_gathers is not None:
            s += f"+limit={self.limit_all_gathers}"
        if self.forward_prefetch:
            s += "+fwd"
        if self.link_gbit is not None:
            s += f"@{self.link_gbit:g}gbit"
        elif self.bandwidth_scale != 1.0:
            s += f"@bw×{self.bandwidth_scale:g}"
        return s


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective of the step, in issue order (``kind`` names the link model)."""

    index: int
    kind: str  # "all_gather" or the reduction's kind ("all_reduce" on gloo, "reduce_scatter")
    unit: str
    phase: Phase
    bytes: int


@dataclass(frozen=True, slots=True)
class Op:
    kind: OpKind
    phase: Phase  # compute phase, or the collective's phase for ISSUE/WAIT
    unit: str
    piece: int = 0  # COMPUTE: which piece of the unit's phase (the root runs in pieces)
    collective: int = -1  # ISSUE/WAIT: index into Program.collectives


@dataclass(frozen=True, slots=True)
class Program:
    ops: tuple[Op, ...]
    collectives: tuple[Collective, ...]
    max_alive_units: int
    max_alive_in_backward: int
    deferred_prefetches: int
    max_mem_units_in_backward: int  # alive full units (gathered or in flight), at a bwd compute
    # per compute op, in order: the most full units alive from its start to the next compute
    # op's start (the memory model's windows, overlapscope/sim/memory.py)
    window_units: tuple[tuple[tuple[Phase, str, int], int], ...] = ()


@dataclass(frozen=True, slots=True)
class StepModel:
    """The shape of a step: units in forward order and collective sizes/kinds."""

    units: tuple[str, ...]  # non-root units in forward order
    ag_bytes: dict[str, int]  # gathered bytes per unit (root included)
    reduce_bytes: dict[str, int]  # gradient reduction bytes per unit (root included)
    reduce_kind: str = CollectiveKind.REDUCE_SCATTER.value
    # every collective blocks its issuing thread until done (torch FSDP on CPU: gloo's
    # collectives return when finished); the engine's are asynchronous on CPU and GPU
    blocking: bool = False

    @property
    def root_is_empty(self) -> bool:
        """No parameters outside the units (torch FSDP's root often has none)."""
        return not self.ag_bytes.get(ROOT, 0) and not self.reduce_bytes.get(ROOT, 0)


class _Recorder:
    """Turns the shared schedule's actions (engine/schedule.py) into the training thread's
    ops, numbering collectives in issue order and counting alive full units per window."""

    def __init__(self, model: StepModel, scenario: Scenario) -> None:
        self.m = model
        self.sched = Schedule(
            policy=scenario.policy,
            forward_prefetch=scenario.forward_prefetch,
            limit_all_gathers=scenario.limit_all_gathers,
            order=(ROOT, *model.units),  # steady state: the forward order is known
            empty=frozenset({ROOT}) if model.root_is_empty else frozenset(),
            prefetch_depth=scenario.prefetch_depth,
        )
        self.ops: list[Op] = []
        self.colls: list[Collective] = []
        self.pending: dict[tuple[str, Phase], int] = {}  # (unit, ag|rs) -> collective index
        self.alive = 0  # full units alive: gathered or in flight (root not counted)
        self.max_mem_bwd = 0
        self.windows: list[tuple[tuple[Phase, str, int], int]] = []

    def _note(self) -> None:
        if self.windows:
            key, most = self.windows[-1]
            self.windows[-1] = (key, max(most, self.alive))

    def _issue(self, kind: str, unit: str, phase: Phase, nbytes: int, slot: Phase) -> None:
        k = len(self.colls)
        self.colls.append(Collective(k, kind, unit, phase, nbytes))
        self.ops.append(Op(OpKind.ISSUE, phase, unit, collective=k))
        self.pending[(unit, slot)] = k
        if self.m.blocking:
            self._wait(unit, slot)  # the call returns when the collective is done

    def _wait(self, unit: str, slot: Phase) -> None:
        k = self.pending.pop((unit, slot), None)
        if k is not None:  # (blocking collectives: waited at issue already)
            self.ops.append(Op(OpKind.WAIT, self.colls[k].phase.wait, unit, collective=k))

    def record(self, actions: list[Action]) -> None:
        for a in actions:
            match a.act:
                case Act.ISSUE | Act.PREFETCH:
                    self._issue(
                        CollectiveKind.ALL_GATHER.value,
                        a.unit,
                        a.phase,
                        self.m.ag_bytes[a.unit],
                        Phase.AG_FWD,
                    )
                    self.alive += a.unit != ROOT
                case Act.WAIT:
                    self._wait(a.unit, Phase.AG_FWD)
                case Act.FREE:
                    self.alive -= a.unit != ROOT
                case Act.REDUCE:
                    nbytes = self.m.reduce_bytes[a.unit]
                    self._issue(self.m.reduce_kind, a.unit, Phase.RS, nbytes, Phase.RS)
                case Act.WAIT_REDUCE:
                    self._wait(a.unit, Phase.RS)
                case _:
                    raise ValueError(f"unhandled action {a.act!r}")
            self._note()

    def compute(self, phase: Phase, unit: str, piece: int = 0) -> None:
        if phase is Phase.BWD:
            # memory held during this compute: the gathered units (an all-gather in flight
            # already holds its unit's full buffer: the engine's ring receives into it)
            self.max_mem_bwd = max(self.max_mem_bwd, self.alive)
        self.ops.append(Op(OpKind.COMPUTE, phase, unit, piece))
        self.windows.append(((phase, unit, piece), self.alive))

    def step(self) -> Program:
        s, units = self.sched, self.m.units
        # Forward: root first, then every unit; the root's own compute runs in pieces
        # between the units (embedding before, head + loss after).
        self.record(s.pre_forward(ROOT))
        self.compute(Phase.FWD, ROOT, 0)
        for i, u in enumerate(units):
            self.record(s.pre_forward(u))
            self.compute(Phase.FWD, u)
            self.record(s.post_forward(u))
            self.compute(Phase.FWD, ROOT, i + 1)
        self.record(s.post_forward(ROOT))
        # Backward: root (head gradient), then units in reverse order.
        self.record(s.pre_backward(ROOT))
        self.compute(Phase.BWD, ROOT, 0)
        for i, u in enumerate(reversed(units)):
            self.record(s.pre_backward(u))
            self.compute(Phase.BWD, u)
            self.record(s.post_backward(u))
            self.compute(Phase.BWD, ROOT, i + 1)
        self.record(s.post_backward(ROOT))
        # End of backward: wait for every reduction in issue order, then the optimizer.
        self.record(s.finish_backward())
        self.compute(Phase.OPTIM, OPTIM_UNIT)
        st = s.stats
        return Program(
            tuple(self.ops),
            tuple(self.colls),
            st.max_alive_units,
            st.max_alive_in_backward,
            st.deferred_prefetches,
            self.max_mem_bwd,
            tuple(self.windows),
        )


def build_program(model: StepModel, scenario: Scenario) -> Program:
    """The training thread's ops for one step of ``model`` under ``scenario``: the shared
    schedule's actions (engine/schedule.py), recorded."""
    return _Recorder(model, scenario).step()
