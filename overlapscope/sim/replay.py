"""A pure discrete-event replay of a step's program (:mod:`overlapscope.sim.schedule`) on
every rank at once (the what-if's second stage):

- the compute lane of rank r is its training thread: ops run back to back; ``WAIT k``
  blocks until collective k is done (the CPU's "NCCL wait");
- the communication lane is one queue per process group: collective k starts when every
  rank has issued it *and* collective k-1 is done (all-gathers and reduce-scatters
  serialise on one stream, in issue order, as NCCL and the engine's one-thread gloo group
  do); a rank that issues early waits inside the op for its peers (peer wait);
- compute that runs while the queue is busy is slowed by ``1 + contention`` (on CPU the
  communication thread takes cycles from the same cores; Echo measured the same on GPU).

Timeline of one backward unit, policy ``backward_pre``, as replayed::

    C (rank r):  ISSUE AG2 | bwd 3 ..................| ISSUE RS3 | WAIT AG2 | bwd 2 ...
    N (group):   AG2 ------------------|  RS3 -----------------|
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from overlapscope.phases import Phase
from overlapscope.sim.schedule import Op, OpKind, Program


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
