"""The GPU replay (overlapscope/sim/device_replay.py) on hand-built steps with known answers:
whichever of host and device is slower sets the step; a collective follows the compute
issued before it (the engine) or not (torch FSDP's gathers); compute follows the collectives
waited on; a wait on a transfer that runs on the host blocks the host; a collective starts
when every rank has reached it."""

from __future__ import annotations

import pytest

from overlapscope.config import Policy
from overlapscope.sim.device_replay import DEVICE, HOST, NOTHING, DeviceScenario, device_replay
from overlapscope.sim.events import replay_metrics
from overlapscope.sim.launches import DeviceModel, HostStep, Launch, OpKey, Segment
from overlapscope.sim.replay import Interval
from overlapscope.sim.schedule import Scenario, StepModel, build_program

COMPUTE, COMM, SIDE = 7, 20, 13  # stream ids
MODEL = StepModel(("u0",), {"root": 0, "u0": 1000}, {"root": 0, "u0": 2000})
PROGRAM = build_program(MODEL, Scenario(Policy.NONE))
FWD_U0: OpKey = ("compute", "fwd", "u0", 0)
BWD_U0: OpKey = ("compute", "bwd", "u0", 0)
AG_FWD: OpKey = ("issue", "ag_fwd", "u0", 0)
WAIT_AG_FWD: OpKey = ("wait", "ag_fwd.wait", "u0", 0)


def kernel(
    offset: float, dur: float, stream: int = COMPUTE, lane: str = "compute", unit: str = "u0"
) -> Launch:
    return Launch(offset, dur, stream, lane, "fwd", unit, transfer=lane == "comm")


def seg(work: float, *launches: Launch, range_us: float = 0.0, block_at: float = float("nan")) -> Segment:  # fmt: skip
    return Segment(work, range_us, tuple(launches), block_at)


def step(ops: dict[OpKey, Segment], head: float = 0.0) -> HostStep:
    return HostStep(seg(head), ops, seg(0.0), sync_return_us=0.0, after_us=0.0)


def model(steps: list[dict[int, HostStep]], follow: bool = True) -> DeviceModel:
    return DeviceModel(
        tuple(steps),
        {r: COMPUTE for r in steps[0]},
        0.0,
        frozenset(),
        gathers_follow_compute=follow,
    )


def scenario(transfer: float, where: str = DEVICE, steps: int = 1) -> DeviceScenario:
    n = len(PROGRAM.collectives)
    return DeviceScenario(PROGRAM, [[transfer] * n] * steps, [where] * n)


def find(rep_intervals: tuple[Interval, ...], lane: str, phase: str, rank: int = 0) -> Interval:
    hits = [
        iv
        for iv in rep_intervals
        if iv.lane == lane and iv.phase is not None and iv.phase.value == phase and iv.rank == rank
    ]
    assert len(hits) == 1, hits
    return hits[0]


def test_the_host_sets_the_step_when_the_device_waits_for_its_launches() -> None:
    ops = {FWD_U0: seg(1000.0, kernel(900.0, 10.0)), BWD_U0: seg(2000.0, kernel(1990.0, 5.0))}
    m = model([{0: step(ops)}, {0: step(ops)}])
    reps = device_replay(m, scenario(0.0, NOTHING, steps=2))
    table = replay_metrics(reps, 1)
    # the first step runs from its first kernel (at 900 µs of host work) to the next step's
    # (at 3000 + 900): the host's 3000 µs, the device busy 15 µs of it
    assert table.loc[0, "step_time_us"] == pytest.approx(3000.0)
    assert table.loc[0, "compute_us"] == pytest.approx(15.0)


def test_the_device_sets_the_step_when_its_work_outlasts_the_host() -> None:
    ops = {FWD_U0: seg(10.0, kernel(0.0, 4000.0)), BWD_U0: seg(10.0, kernel(0.0, 6000.0))}
    reps = device_replay(model([{0: step(ops)}, {0: step(ops)}]), scenario(0.0, NOTHING, 2))
    table = replay_metrics(reps, 1)
    # the host syncs after 10 ms of kernels; the next step's first kernel follows at once
    assert table.loc[0, "step_time_us"] == pytest.approx(10_000.0)
    assert table.loc[0, "idle_us"] == pytest.approx(0.0)


def _gather_step() -> dict[int, HostStep]:
    """Forward: unit u0's all-gather issued after 1 ms of compute was queued, then waited on
    and u0's forward compute launched."""
    ops = {
        ("compute", "fwd", "root", 0): seg(10.0, kernel(0.0, 1000.0, unit="root")),
        AG_FWD: seg(10.0, kernel(5.0, 0.0, COMM, "comm")),
        WAIT_AG_FWD: seg(10.0),
        FWD_U0: seg(10.0, kernel(0.0, 300.0)),
    }
    return {0: step(ops)}


def test_an_engine_collective_follows_the_compute_issued_before_it() -> None:
    rep = device_replay(model([_gather_step()]), scenario(500.0))[0]
    ag = find(rep.intervals, "comm", "ag_fwd")
    fwd = next(iv for iv in rep.intervals if iv.lane == "compute" and iv.unit == "u0")
    assert ag.start_us == pytest.approx(1000.0)  # after the root's 1 ms on the compute stream
    assert ag.end_us == pytest.approx(1500.0)
    assert fwd.start_us == pytest.approx(1500.0)  # the compute stream waited on it


def test_a_torch_gather_runs_beside_the_compute_issued_before_it() -> None:
    rep = device_replay(model([_gather_step()], follow=False), scenario(500.0))[0]
    ag = find(rep.intervals, "comm", "ag_fwd")
    fwd = next(iv for iv in rep.intervals if iv.lane == "compute" and iv.unit == "u0")
    assert ag.start_us == pytest.approx(15.0)  # at its launch: 10 µs of root, 5 into the issue
    assert fwd.start_us == pytest.approx(1000.0)  # after the root's compute, the gather done


def test_a_wait_on_a_host_transfer_blocks_the_host() -> None:
    ops = {
        AG_FWD: seg(10.0, kernel(5.0, 50.0, SIDE, "memory")),  # the copy to the host
        WAIT_AG_FWD: seg(30.0, kernel(25.0, 20.0), block_at=20.0),  # then the copy back
        FWD_U0: seg(10.0, kernel(0.0, 300.0)),
    }
    rep = device_replay(model([{0: step(ops)}]), scenario(1000.0, HOST))[0]
    ring = find(rep.intervals, "comm", "ag_fwd")
    assert (ring.start_us, ring.end_us) == pytest.approx((55.0, 1055.0))  # after the copy
    back = next(iv for iv in rep.intervals if iv.stream == COMPUTE)
    # the host resumed at the ring's end and launched the copy back 5 µs of work later
    assert back.start_us == pytest.approx(1060.0)


def test_a_collective_starts_when_every_rank_has_reached_it() -> None:
    late = step(_gather_step()[0].ops, head=700.0)
    rep = device_replay(model([{0: _gather_step()[0], 1: late}]), scenario(500.0))[0]
    a0, a1 = find(rep.intervals, "comm", "ag_fwd", 0), find(rep.intervals, "comm", "ag_fwd", 1)
    # rank 1 queued its root compute 700 µs later: ready at 1700; both end at 1700 + 500
    assert (a0.start_us, a1.start_us) == pytest.approx((1000.0, 1700.0))
    assert a0.end_us == a1.end_us == pytest.approx(2200.0)
