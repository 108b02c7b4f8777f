"""A pure discrete-event replay of one training step under a :class:`Scenario`.

Two stages, mirroring how the engine (``overlapscope/engine/sharded.py``) works:

1. :func:`build_program` runs the engine's own schedule (``engine/schedule.py``: issue on
   demand, prefetch points of each policy, forward prefetch, the rate limiter's deferral,
   reshard after forward/backward, reduce-scatter waits at the end of backward) hook by hook
   and records the training thread's program: ``COMPUTE``, ``ISSUE k`` and ``WAIT k`` ops, plus the list of
   collectives in issue order. Which prefetch is held back depends only on the order of
   issues and frees on the thread, never on timing, so the program is the same on every
   rank and is built once. It also counts alive full-parameter units (peak memory).
2. :func:`replay` plays the program on every rank at once:

   - the compute lane of rank r is its training thread: ops run back to back; ``WAIT k``
     blocks until collective k is done (the CPU's "NCCL wait");
   - the communication lane is one queue per process group: collective k starts when every
     rank has issued it *and* collective k-1 is done (all-gathers and reduce-scatters
     serialise on one stream, in issue order, as NCCL and the engine's one-thread gloo
     group do); a rank that issues early waits inside the op for its peers (peer wait);
   - compute that runs while the queue is busy is slowed by ``1 + contention`` (on CPU the
     communication thread takes cycles from the same cores; Echo measured the same on GPU).

Timeline of one backward unit, policy ``backward_pre``, as replayed::

    C (rank r):  ISSUE AG2 | bwd 3 ..................| ISSUE RS3 | WAIT AG2 | bwd 2 ...
    N (group):   AG2 ------------------|  RS3 -----------------|
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from overlapscope.engine.config import Policy
from overlapscope.engine.schedule import Act, Action, Schedule
from overlapscope.trace.names import OPTIM_UNIT, ROOT_UNIT, Phase

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
    reduce_kind: str = "reduce_scatter"
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
                        "all_gather", a.unit, a.phase, self.m.ag_bytes[a.unit], Phase.AG_FWD
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


# --------------------------------------------------------------------------- replay


@dataclass(frozen=True, slots=True)
class RankTimes:
    """Per-rank durations the replay needs (µs)."""

    compute_us: dict[tuple[Phase, str, int], float]  # (phase, unit, piece) -> duration
    issue_us: dict[Phase, float] = field(default_factory=dict)  # issue cost per comm phase
    start_overhead_us: float = 0.0  # per-step thread time outside every range, at step start
    gap_us: float = 0.0  # thread time outside every range before each compute op


@dataclass(frozen=True, slots=True)
class Interval:
    rank: int
    lane: str  # "compute", "wait", "issue" (training thread) or "comm"; GPU: "memory" too
    phase: Phase | None  # None: a GPU activity outside every unit's phase
    unit: str
    start_us: float
    end_us: float
    collective: int = -1
    stream: int = -1  # a GPU activity's stream (sim/device_replay.py); -1: the host's

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True, slots=True)
class Replay:
    program: Program
    intervals: tuple[Interval, ...]
    step_time_us: dict[int, float]  # per rank
    coll_start_us: tuple[float, ...]
    coll_end_us: tuple[float, ...]
    origin_us: float | None = None  # GPU (device_replay.py): the step's start, steps back to back
    step_start_us: dict[int, float] | None = None  # GPU: each rank's start after origin_us


def _stretch(t: float, work_us: float, busy: Sequence[tuple[float, float]], factor: float) -> float:
    """End time of ``work_us`` of compute started at ``t`` that runs ``1 + factor`` times
    slower while the communication lane is busy (``busy``: sorted, disjoint intervals)."""
    if factor <= 0 or work_us <= 0:
        return t + work_us
    left = work_us
    for s, e in busy:
        if e <= t:
            continue
        if s > t:  # free-running segment before this busy interval
            if s - t >= left:
                return t + left
            left -= s - t
            t = s
        span = (e - t) / (1 + factor)  # work done while busy
        if span >= left:
            return t + left * (1 + factor)
        left -= span
        t = e
    return t + left


class _CommQueue:
    """The one communication queue the ranks share: collective k starts once every rank has
    issued it and collective k-1 is done, and takes ``transfer_us[k]``."""

    def __init__(self, program: Program, transfer_us: Sequence[float], num_ranks: int) -> None:
        ncoll = len(program.collectives)
        self.program, self.transfer_us, self.num_ranks = program, transfer_us, num_ranks
        self.issued: list[dict[int, float]] = [{} for _ in range(ncoll)]
        self.start = [float("nan")] * ncoll
        self.end = [float("nan")] * ncoll
        self.busy: list[tuple[float, float]] = []  # the queue's busy intervals (known so far)
        self.next_coll = 0
        self.lane_free = 0.0

    def issue(self, k: int, rank: int, t_us: float, out: list[Interval]) -> None:
        """Rank ``rank`` issued collective ``k`` at ``t_us``; schedule what is now ready."""
        self.issued[k][rank] = t_us
        while (
            self.next_coll < len(self.issued) and len(self.issued[self.next_coll]) == self.num_ranks
        ):
            k = self.next_coll
            prev_free = self.lane_free
            self.start[k] = max(max(self.issued[k].values()), self.lane_free)
            self.end[k] = self.start[k] + self.transfer_us[k]
            self.lane_free = self.end[k]
            self.busy.append((self.start[k], self.end[k]))
            c = self.program.collectives[k]
            for r, t_issue in self.issued[k].items():
                # each rank's op runs from when its queue reaches it (peer wait included)
                s_r = max(t_issue, prev_free)
                out.append(Interval(r, "comm", c.phase, c.unit, s_r, self.end[k], k))
            self.next_coll += 1


def _advance(
    r: int, times: RankTimes, ops: Sequence[Op], pc: dict[int, int], now: dict[int, float],
    queue: _CommQueue, contention: float, out: list[Interval],
) -> bool:  # fmt: skip
    """Play rank ``r``'s ops until it waits on an unscheduled collective; True if any ran."""
    progressed = False
    while pc[r] < len(ops):
        op = ops[pc[r]]
        t = now[r]
        if op.kind is OpKind.COMPUTE:
            t += times.gap_us
            work = times.compute_us.get((op.phase, op.unit, op.piece), 0.0)
            t_end = _stretch(t, work, queue.busy, contention)
            out.append(Interval(r, "compute", op.phase, op.unit, t, t_end))
        elif op.kind is OpKind.ISSUE:
            t_end = t + times.issue_us.get(op.phase, 0.0)
            out.append(Interval(r, "issue", op.phase, op.unit, t, t_end, op.collective))
            queue.issue(op.collective, r, t_end, out)
        else:  # WAIT: blocks the thread until the collective is done
            done = queue.end[op.collective]
            if np.isnan(done):
                break  # not scheduled yet: a peer has not issued it
            t_end = max(t, done)
            out.append(Interval(r, "wait", op.phase, op.unit, t, t_end, op.collective))
        now[r] = t_end
        pc[r] += 1
        progressed = True
    return progressed


def replay(
    program: Program,
    ranks: dict[int, RankTimes],
    transfer_us: Sequence[float],
    contention: float = 0.0,
) -> Replay:
    """Play ``program`` on every rank; ``transfer_us[k]`` is collective k's wire time."""
    if len(transfer_us) != len(program.collectives):
        raise ValueError("transfer_us needs one duration per collective of the program")
    if not ranks:
        raise ValueError("replay needs at least one rank")
    queue = _CommQueue(program, transfer_us, len(ranks))
    pc = dict.fromkeys(ranks, 0)
    now = {r: t.start_overhead_us for r, t in ranks.items()}
    out: list[Interval] = []
    ops = program.ops
    while any(pc[r] < len(ops) for r in ranks):
        progressed = False
        for r, times in ranks.items():
            progressed |= _advance(r, times, ops, pc, now, queue, contention, out)
        if not progressed:
            raise AssertionError("replay deadlocked: ranks wait on collectives never issued")
    return Replay(program, tuple(out), dict(now), tuple(queue.start), tuple(queue.end))
