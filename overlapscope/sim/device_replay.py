"""The GPU replay: the host issues, the device runs, whichever is slower sets the step.

Per rank the host plays the scenario's program (``sim/schedule.py``) op by op, each op's
measured host work and launches (``sim/launches.py``) in order; the device runs each launch
on its stream:

- an activity starts ``launch_latency`` after its launch call, once its stream is free;
- on the compute stream, not before the collectives the host has waited on (a ``WAIT`` makes
  the compute stream wait: NCCL's ``work.wait()``, FSDP's ``wait_stream``);
- on any other stream (NCCL's, FSDP's copy streams, the engine's staging stream), not before
  the work already queued on the compute stream when it was launched, nor before the earlier
  launches of its op on other streams (a collective is ordered after the compute issued
  before it, and after its own copy-in);
- a collective's transfer on the device starts on every rank once every rank has reached it
  and lasts the scenario's transfer time (the measured lane time, rescaled to the link); a
  transfer on the host (the engine's gloo on CUDA) starts once every rank's copy to the host
  is done and its host lane is free, and a ``WAIT`` on it blocks the host until it ends;
  a collective that moves nothing (torch FSDP2's all-gather at world size 1) is done when
  its issue is;
- the step ends with the host's synchronisation: it waits for the device, then the next
  step's host work begins after the measured loop overhead.

The steps run back to back, so a device-bound step is the device's work and its bubbles, a
host-bound one the host's issue time, as measured; the replayed intervals are the analysis'
event table (``sim/events.py``: GPU rows by stream, host transfers as host rows), and the
predicted figures are the analysis' own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from overlapscope.phases import Phase
from overlapscope.sim.launches import EMPTY, DeviceModel, HostStep, Launch, OpKey, Segment, op_key
from overlapscope.sim.replay import Interval, Replay
from overlapscope.sim.schedule import Op, OpKind, Program

NAN = math.nan
GATHERS = (Phase.AG_FWD, Phase.AG_BWD)
# One step of a rank's play: ("host", µs) · ("launch", Launch, collective or -1) ·
# ("issued", collective) · ("wait", collective) · ("range", lane, phase, unit, µs, collective)
# · ("seg", follows compute) · ("step", index) · ("sync", return µs) · ("drain",)
Action = tuple[Any, ...]
HOST, DEVICE, NOTHING = "host", "device", "nothing"  # where a collective's transfer runs


def _phase(value: str | None) -> Phase | None:
    try:
        return Phase(value) if value else None
    except ValueError:
        return None


@dataclass(slots=True)
class _Coll:
    """A collective of the replay (one per program collective and step)."""

    where: str
    transfer_us: float
    step: int
    k: int  # its index in the program
    ready: dict[int, float] = field(default_factory=dict)
    stream: dict[int, int] = field(default_factory=dict)
    start_us: float = NAN
    end_us: float = NAN


def _segment(step: HostStep, key: OpKey) -> Segment:
    """The measured segment of an op; an op the measured program never ran (none so far:
    every policy runs the same ops in another order) does nothing."""
    return step.ops.get(key, EMPTY)


def _actions(
    seg: Segment, op: Op | None, g: int, where: str, gathers_follow: bool = True
) -> list[Action]:
    """One segment as the rank's micro-actions: host work, launches, the host's waits for
    the device to drain, and (``op``) its collective's issue or wait at its place."""
    gather = op is not None and op.kind is OpKind.ISSUE and op.phase in GATHERS
    issue = op is not None and op.kind is OpKind.ISSUE
    timed: list[tuple[float, int, Action]] = [(d, 0, ("drain",)) for d in seg.drains_at_us]
    if op is not None and op.kind is OpKind.WAIT:
        at = seg.block_at_us if math.isfinite(seg.block_at_us) else seg.work_us - seg.range_us
        timed.append((at, 0, ("wait", g)))
    transferred = False
    for launch in seg.launches:
        mine = issue and launch.transfer and where == DEVICE
        timed.append((launch.offset_us, 1, ("launch", launch, g if mine else -1)))
        transferred |= mine
    acts: list[Action] = [("seg", gathers_follow or not gather)]
    t = 0.0
    for at, _, act in sorted(timed, key=lambda x: (x[0], x[1])):
        acts += [("host", at - t), act]
        t = max(t, at)
    acts.append(("host", seg.work_us - t))
    if issue and not transferred:
        acts.append(("issued", g))
    if op is not None:
        lane = {OpKind.ISSUE: "issue", OpKind.WAIT: "wait"}.get(op.kind, "other")
        acts.append(("range", lane, op.phase, op.unit, seg.range_us, g))
    return acts


class _Rank:
    """One rank's host and streams."""

    def __init__(self, rank: int, acts: list[Action], compute: int, latency: float) -> None:
        self.r, self.acts, self.compute, self.latency = rank, acts, compute, latency
        self.pc, self.h, self.barrier, self.dep, self.lane_free = 0, 0.0, 0.0, 0.0, 0.0
        self.follow = True  # this segment's side-stream launches follow the compute stream
        self.free: dict[int, float] = {}
        self.step = -1
        self.starts: dict[int, float] = {}
        self.out: list[tuple[int, Interval]] = []

    def emit(self, step: int, iv: Interval) -> None:
        self.out.append((step, iv))

    def launch(self, launch: Launch, g: int, colls: list[_Coll]) -> bool:
        s = launch.stream
        after = [self.h + self.latency, self.free.get(s, 0.0)]
        if s == self.compute:
            after.append(self.barrier)
        else:
            after += [self.free.get(self.compute, 0.0) if self.follow else 0.0, self.dep]
        if any(math.isnan(x) for x in after):
            return False  # its stream (or its op's copy-in) waits on a collective not yet placed
        start = max(after)
        if g >= 0:
            colls[g].ready[self.r], colls[g].stream[self.r] = start, s
            self.free[s] = NAN
            return True
        end = start + launch.dur_us
        self.free[s] = end
        if s != self.compute:
            self.dep = max(self.dep, end)
        phase = _phase(launch.phase)
        self.emit(self.step, Interval(self.r, launch.lane, phase, launch.unit or "", start, end, -1, s))  # fmt: skip
        return True

    def advance(self, colls: list[_Coll]) -> bool:
        """Play actions until one waits on something not yet known; True if any ran."""
        ran = False
        while self.pc < len(self.acts):
            if not self._do(self.acts[self.pc], colls):
                break
            self.pc += 1
            ran = True
        return ran

    def _do(self, act: Action, colls: list[_Coll]) -> bool:
        match act[0]:
            case "host":
                self.h += max(act[1], 0.0)
            case "seg":
                self.dep, self.follow = 0.0, act[1]
            case "launch":
                return self.launch(act[1], act[2], colls)
            case "issued":
                c = colls[act[1]]
                ready = max(self.h, self.dep)
                if c.where == HOST:
                    if math.isnan(self.lane_free):
                        return False  # the host lane's previous transfer is not placed yet
                    ready = max(ready, self.lane_free)
                    self.lane_free = NAN
                c.ready[self.r] = ready
            case "wait":
                c = colls[act[1]]
                if math.isnan(c.end_us):
                    return False
                if c.where == HOST:
                    self.h = max(self.h, c.end_us)
                else:
                    self.barrier = max(self.barrier, c.end_us)
            case "range":
                _, lane, phase, unit, range_us, g = act
                k = colls[g].k if g >= 0 else -1
                self.emit(self.step, Interval(self.r, lane, phase, unit, self.h - range_us, self.h, k))  # fmt: skip
            case "step":
                self.step = act[1]
                self.starts[self.step] = self.h
            case "sync" | "drain":  # the host waits until the device has done its work
                ends = [*self.free.values(), self.lane_free]
                if any(math.isnan(x) for x in ends):
                    return False
                self.h = max(self.h, *ends) + (act[1] if act[0] == "sync" else 0.0)
            case _:
                raise ValueError(f"unknown action {act[0]!r}")
        return True


def _resolve(colls: list[_Coll], ranks: dict[int, _Rank]) -> None:
    """Place every collective all ranks have reached."""
    for c in colls:
        if not math.isnan(c.end_us) or len(c.ready) < len(ranks):
            continue
        c.start_us = max(c.ready.values())
        c.end_us = c.start_us + c.transfer_us
        for r, rk in ranks.items():
            if c.where == DEVICE and r in c.stream:  # (none: its issue launched no transfer)
                s = c.stream[r]
                rk.free[s] = c.end_us
                rk.emit(c.step, Interval(r, "comm", None, "", c.ready[r], c.end_us, c.k, s))
            elif c.where == HOST:
                rk.lane_free = c.end_us
                rk.emit(c.step, Interval(r, "comm", None, "", c.ready[r], c.end_us, c.k))


@dataclass(frozen=True, slots=True)
class DeviceScenario:
    """What the replay needs beyond the measured steps: per step, the transfer time of each
    program collective; where each collective's transfer runs."""

    program: Program
    transfer_us: Sequence[Sequence[float]]  # per step, per program collective
    where: Sequence[str]  # per program collective: HOST, DEVICE or NOTHING


def _rank_actions(model: DeviceModel, sc: DeviceScenario, rank: int) -> list[Action]:
    ncoll = len(sc.program.collectives)
    acts: list[Action] = []
    for s, steps in enumerate(model.steps):
        hs = steps[rank]
        acts.append(("step", s))
        acts += _actions(hs.head, None, -1, NOTHING)
        for op in sc.program.ops:
            g = s * ncoll + op.collective if op.collective >= 0 else -1
            where = sc.where[op.collective] if op.collective >= 0 else NOTHING
            follow = model.gathers_follow_compute
            acts += _actions(_segment(hs, op_key(op)), op, g, where, follow)
        acts += _actions(hs.tail, None, -1, NOTHING)
        acts += [("sync", hs.sync_return_us), ("host", hs.after_us)]
    acts.append(("step", len(model.steps)))
    return acts


def device_replay(model: DeviceModel, sc: DeviceScenario) -> tuple[Replay, ...]:
    """Replay every measured step of every rank under ``sc``; one :class:`Replay` per step."""
    program = sc.program
    colls = [
        _Coll(sc.where[c.index], float(sc.transfer_us[s][c.index]), s, c.index)
        for s in range(len(model.steps))
        for c in program.collectives
    ]
    ranks = {
        r: _Rank(r, _rank_actions(model, sc, r), model.compute_stream[r], model.launch_latency_us)
        for r in sorted(model.steps[0])
    }
    while any(rk.pc < len(rk.acts) for rk in ranks.values()):
        ran = False
        for rk in ranks.values():
            ran |= rk.advance(colls)
            _resolve(colls, ranks)
        if not ran:
            raise AssertionError("GPU replay deadlocked: a rank waits on a collective never issued")
    return _replays(program, colls, ranks, len(model.steps))


def _replays(
    program: Program, colls: list[_Coll], ranks: dict[int, _Rank], num_steps: int
) -> tuple[Replay, ...]:
    ncoll = len(program.collectives)
    out = []
    for s in range(num_steps):
        origin = min(rk.starts[s] for rk in ranks.values())
        ivs = tuple(
            _shift(iv, origin, program) for rk in ranks.values() for st, iv in rk.out if st == s
        )
        mine = colls[s * ncoll : (s + 1) * ncoll]
        out.append(
            Replay(
                program=program,
                intervals=ivs,
                step_time_us={r: rk.starts[s + 1] - rk.starts[s] for r, rk in ranks.items()},
                coll_start_us=tuple(c.start_us - origin for c in mine),
                coll_end_us=tuple(c.end_us - origin for c in mine),
                origin_us=origin,
                step_start_us={r: rk.starts[s] - origin for r, rk in ranks.items()},
            )
        )
    return tuple(out)


def _shift(iv: Interval, origin: float, program: Program) -> Interval:
    """``iv`` on its step's clock; a collective's rows take its phase and unit."""
    phase, unit = iv.phase, iv.unit
    if iv.lane == "comm" and iv.collective >= 0:
        c = program.collectives[iv.collective]
        phase, unit = c.phase, c.unit
    return Interval(
        iv.rank, iv.lane, phase, unit, iv.start_us - origin, iv.end_us - origin,
        iv.collective, iv.stream,
    )  # fmt: skip
