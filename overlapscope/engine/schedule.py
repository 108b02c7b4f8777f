"""The prefetch schedule, torch-free: what to issue, wait on, free and reduce, and when.

One definition, run by two sides: the engine's hooks (``engine/sharded.py``) *execute* the
actions on tensors, and the what-if simulator (``sim/schedule.py``) *records* them as the
program it replays. Each hook of a step asks :class:`Schedule` for its actions::

    pre_forward(u)   ISSUE u (on demand) · PREFETCH next (forward prefetch) · WAIT u
    post_forward(u)  FREE u (full_shard: reshard after forward)
    pre_backward(u)  ISSUE u · PREFETCH next (backward_pre) · WAIT u
    post_backward(u) FREE u · PREFETCH next (backward_post) · REDUCE u
    finish_backward  WAIT_REDUCE every unit, in issue order · WAIT + FREE stale units

The backward policies differ only in where the next unit's all-gather is issued
(:meth:`Schedule._backward_prefetch`, the one ``match`` on the policy)::

    none           C: ..wait AG3|bwd 3|......wait AG2|bwd 2|
    backward_post  C: ..wait AG3|bwd 3|wait AG2|bwd 2|          (AG2 issued after bwd 3)
    backward_pre   C: ..wait AG3|bwd 3.........|bwd 2|          (AG2 issued before bwd 3)

The rate limiter (``limit_all_gathers=K``) holds a prefetch back while K units are alive and
releases it at the next FREE (the engine adds, on CUDA, a wait on the oldest free event
when it executes the PREFETCH). The root unit is gathered at the start of forward and kept
until its gradients are reduced; it is not counted as alive.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from overlapscope.config import Policy, Sharding
from overlapscope.phases import Phase
from overlapscope.trace.naming.ranges import ROOT_UNIT


class Act(enum.Enum):
    ISSUE = "issue"  # all-gather a unit's parameters, needed now
    PREFETCH = "prefetch"  # all-gather a unit's parameters ahead of need
    WAIT = "wait"  # block until the unit's all-gather is done
    FREE = "free"  # reshard: drop the unit's full parameters
    REDUCE = "reduce"  # issue the unit's gradient reduction (reduce-scatter / all-reduce)
    WAIT_REDUCE = "wait_reduce"  # block until the unit's reduction is done


@dataclass(frozen=True, slots=True)
class Action:
    act: Act
    unit: str
    phase: Phase  # the collective's phase: ag_fwd, ag_bwd, rs or ar (WAIT: the awaited one's)


@dataclass
class ScheduleStats:
    """Counters the tests and run.json read (per rank, whole run)."""

    max_alive_units: int = 0
    max_alive_in_backward: int = 0
    deferred_prefetches: int = 0


class Schedule:
    """The schedule's state over a run: gathered units, the held-back prefetch, reductions.

    ``order`` (units in forward order, root first) makes the schedule start in steady state,
    as the simulator needs; the engine leaves it out and the first forward records it (no
    prefetch in that first step: the next unit is not known yet)."""

    def __init__(
        self,
        *,
        policy: Policy,
        forward_prefetch: bool = False,
        limit_all_gathers: int | None = None,
        sharding: Sharding = Sharding.FULL_SHARD,
        empty: frozenset[str] = frozenset(),
        order: tuple[str, ...] | None = None,
        prefetch_depth: int = 1,
    ) -> None:
        if prefetch_depth < 1:
            raise ValueError(f"prefetch_depth {prefetch_depth} must be >= 1")
        self.policy = policy
        self.depth = prefetch_depth  # units prefetched ahead in backward (torch FSDP2's
        # set_modules_to_backward_prefetch with N modules; the engine prefetches 1)
        self.forward_prefetch = forward_prefetch
        self.limit = limit_all_gathers
        self.sharding = sharding
        self.empty = empty  # units without parameters: nothing to gather, free or reduce
        self.order: list[str] = list(order) if order is not None else []
        self.frozen = order is not None
        self.gathered: set[str] = set()  # issued (or local copy made) and not freed
        self.pending: dict[str, Phase] = {}  # all-gather issued and not waited: its phase
        self.alive: set[str] = set()  # gathered non-root units (the limiter's window)
        self.deferred: tuple[str, Phase] | None = None
        self.reducing: list[str] = []  # reductions issued this backward, in issue order
        self.in_backward = False
        self.stats = ScheduleStats()

    # ------------------------------------------------------------------ helpers
    def _note_alive(self) -> None:
        n = len(self.alive)
        self.stats.max_alive_units = max(self.stats.max_alive_units, n)
        if self.in_backward:
            self.stats.max_alive_in_backward = max(self.stats.max_alive_in_backward, n)

    def next_forward(self, u: str) -> str | None:
        if not self.frozen:
            return None
        i = self.order.index(u)
        return self.order[i + 1] if i + 1 < len(self.order) else None

    def next_backward(self, u: str, k: int = 1) -> str | None:
        """The unit ``k`` places after ``u`` in backward order (root first)."""
        if not self.frozen:
            return None
        order = [ROOT_UNIT, *reversed([x for x in self.order if x != ROOT_UNIT])]
        i = order.index(u)
        return order[i + k] if i + k < len(order) else None

    def _prefetch_ahead(self, u: str) -> list[Action]:
        """PREFETCH the next ``depth`` units in backward order (stops at a held-back one)."""
        out: list[Action] = []
        for k in range(1, self.depth + 1):
            out += self._prefetch(self.next_backward(u, k), Phase.AG_BWD)
            if self.deferred is not None:
                break
        return out

    def _needs_gather(self, u: str) -> bool:
        return u not in self.empty and u not in self.gathered

    def _gather(self, act: Act, u: str, phase: Phase) -> list[Action]:
        self.gathered.add(u)
        if self.sharding is not Sharding.NO_SHARD:
            self.pending[u] = phase  # no_shard: a local copy, nothing in flight
        if self.deferred is not None and self.deferred[0] == u:
            self.deferred = None  # gathered before the held-back prefetch was released
        if u != ROOT_UNIT and self.sharding is not Sharding.NO_SHARD:
            self.alive.add(u)
            self._note_alive()
        return [Action(act, u, phase)]

    def _ensure(self, u: str, phase: Phase) -> list[Action]:
        """On-demand gather: never held back by the limiter (the data is needed now)."""
        return self._gather(Act.ISSUE, u, phase) if self._needs_gather(u) else []

    def _prefetch(self, u: str | None, phase: Phase) -> list[Action]:
        if u is None or self.sharding is Sharding.NO_SHARD or not self._needs_gather(u):
            return []
        if self.limit is not None and u != ROOT_UNIT and len(self.alive) >= self.limit:
            self.deferred = (u, phase)  # held back: the next FREE releases it
            self.stats.deferred_prefetches += 1
            return []
        return self._gather(Act.PREFETCH, u, phase)

    def _wait(self, u: str) -> list[Action]:
        phase = self.pending.pop(u, None)
        return [] if phase is None else [Action(Act.WAIT, u, phase)]

    def _free(self, u: str) -> list[Action]:
        if u in self.empty or self.sharding is Sharding.NO_SHARD:
            return []
        self.gathered.discard(u)
        self.alive.discard(u)
        self._note_alive()
        out = [Action(Act.FREE, u, Phase.AG_BWD if self.in_backward else Phase.AG_FWD)]
        if self.deferred is not None:
            d, phase = self.deferred
            self.deferred = None
            out += self._prefetch(d, phase)
        return out

    def _backward_prefetch(self, u: str, *, after_compute: bool) -> list[Action]:
        """The backward policies, in one place: where the next unit's all-gather goes."""
        match self.policy:
            case Policy.NONE:
                return []
            case Policy.BACKWARD_PRE:
                return [] if after_compute else self._prefetch_ahead(u)
            case Policy.BACKWARD_POST:
                # (the root's gradients complete last: nothing is left to prefetch)
                if not after_compute or u == ROOT_UNIT:
                    return []
                return self._prefetch_ahead(u)
        raise ValueError(f"unhandled policy {self.policy!r}")

    # ------------------------------------------------------------------ the hooks
    def pre_forward(self, u: str) -> list[Action]:
        if u == ROOT_UNIT:
            self.in_backward = False
            if self.sharding is Sharding.NO_SHARD:
                self.gathered.clear()  # every unit's local copy is refreshed once per step
        elif not self.frozen:
            self.order.append(u)
        out = self._ensure(u, Phase.AG_FWD)  # ISSUE on demand (if not prefetched)
        if self.forward_prefetch:
            out += self._prefetch(self.next_forward(u), Phase.AG_FWD)  # PREFETCH next unit
        return out + self._wait(u)  # WAIT: this unit's parameters are needed now

    def post_forward(self, u: str) -> list[Action]:
        if u == ROOT_UNIT:
            self.deferred = None  # forward is over: a held-back forward prefetch is moot
            if not self.frozen:
                self.order.insert(0, u)
                self.frozen = True
            return []
        if self.sharding is Sharding.FULL_SHARD:
            return self._free(u)  # reshard after forward
        return []

    def pre_backward(self, u: str) -> list[Action]:
        if u == ROOT_UNIT:
            self.in_backward = True
            self.reducing = []
        out = self._ensure(u, Phase.AG_BWD) if self.sharding is Sharding.FULL_SHARD else []
        out += self._backward_prefetch(u, after_compute=False)  # PREFETCH before compute
        out += self._wait(u)  # WAIT: gradient compute needs the full parameters
        self._note_alive()
        return out

    def post_backward(self, u: str) -> list[Action]:
        out = [] if u == ROOT_UNIT else self._free(u)  # reshard after backward
        out += self._backward_prefetch(u, after_compute=True)  # PREFETCH after compute
        if u not in self.empty:
            phase = Phase.AR if self.sharding is Sharding.NO_SHARD else Phase.RS
            out.append(Action(Act.REDUCE, u, phase))  # ISSUE the gradient reduction
            self.reducing.append(u)
        if u == ROOT_UNIT:
            out += self._free(u)
        return out

    def finish_backward(self) -> list[Action]:
        """Once the whole backward is done: wait for every reduction in issue order (they
        complete in that order on one queue), then drop units this backward never used."""
        phase = Phase.AR if self.sharding is Sharding.NO_SHARD else Phase.RS
        out = [Action(Act.WAIT_REDUCE, u, phase) for u in self.reducing]
        self.reducing = []
        self.in_backward = False
        self.deferred = None  # a prefetch still held back has no unit left to serve
        for u in [x for x in self.order if x != ROOT_UNIT and x in self.gathered]:
            if self.sharding is Sharding.NO_SHARD:
                continue
            out += self._wait(u)
            out += self._free(u)
        return out
