"""Hand-built schedules with known answers (worked out by hand in the comments)."""

from __future__ import annotations

import pytest

from overlapscope.config import Policy
from overlapscope.phases import Phase
from overlapscope.sim.events import replay_metrics
from overlapscope.sim.replay import RankTimes, _stretch, replay
from overlapscope.sim.schedule import Program, Scenario, StepModel, build_program

UNITS = ("u0", "u1", "u2", "u3")
BYTES = {u: 100 for u in ("root", *UNITS)}
MODEL = StepModel(UNITS, BYTES, BYTES, "all_reduce")


def times(bwd_us: float = 10.0, fwd_us: float = 0.0, optim_us: float = 0.0) -> RankTimes:
    compute = {(Phase.FWD, u, 0): fwd_us for u in UNITS}
    compute |= {(Phase.BWD, u, 0): bwd_us for u in UNITS}
    compute[(Phase.OPTIM, "all", 0)] = optim_us
    return RankTimes(compute)  # root pieces, issues, overhead: 0


def transfers(prog: Program, ag_bwd: float, rs: float, ag_fwd: float = 0.0) -> list[float]:
    """Root collectives free; unit all-gathers/reductions as given."""
    out = []
    for c in prog.collectives:
        if c.unit == "root":
            out.append(0.0)
        elif c.phase is Phase.AG_FWD:
            out.append(ag_fwd)
        elif c.phase is Phase.AG_BWD:
            out.append(ag_bwd)
        else:
            out.append(rs)
    return out


def step_us(scenario: Scenario, ag_bwd: float, rs: float, **kw: float) -> float:
    prog = build_program(MODEL, scenario)
    rep = replay(prog, {0: times(**kw)}, transfers(prog, ag_bwd, rs))
    return rep.step_time_us[0]


def test_serial_sum_without_prefetch() -> None:
    # none: every all-gather is exposed and nothing overlaps: 4 × (AG 6 + bwd 10) + optim 5
    assert step_us(Scenario(Policy.NONE), ag_bwd=6, rs=0, optim_us=5) == pytest.approx(69)


def test_backward_pre_overlaps_to_sum_of_max() -> None:
    # backward_pre: only the first all-gather is exposed: 6 + Σ max(bwd 10, AG 6) = 46
    assert step_us(Scenario(Policy.BACKWARD_PRE), ag_bwd=6, rs=0) == pytest.approx(46)
    # communication-bound: AG 15 > bwd 10: 15 + 3 × 15 + last bwd 10 = 70
    assert step_us(Scenario(Policy.BACKWARD_PRE), ag_bwd=15, rs=0) == pytest.approx(70)


def test_all_gather_queues_behind_reduce_scatter() -> None:
    # none, RS 20: u2's AG is issued after RS u3 and waits for it on the one queue:
    # AG3 0-6, bwd3 6-16, RS3 16-36, AG2 36-42, bwd2 42-52, RS2 52-72, AG1 72-78,
    # bwd1 78-88, RS1 88-108, AG0 108-114, bwd0 114-124, RS0 124-144 -> 144
    assert step_us(Scenario(Policy.NONE), ag_bwd=6, rs=20) == pytest.approx(144)
    # backward_post issues AG2 before RS3: AG2 16-22, RS3 22-42, bwd2 22-32, AG1 42-48,
    # RS2 48-68, bwd1 48-58, AG0 68-74, RS1 74-94, bwd0 74-84, RS0 94-114 -> 114
    assert step_us(Scenario(Policy.BACKWARD_POST), ag_bwd=6, rs=20) == pytest.approx(114)


def test_limiter_holds_prefetch_until_free() -> None:
    # limit 1 with backward_pre: each prefetch is held until the current unit is freed,
    # i.e. issued where backward_post would issue it.
    lim = Scenario(Policy.BACKWARD_PRE, limit_all_gathers=1)
    prog = build_program(MODEL, lim)
    assert prog.deferred_prefetches == 3
    assert prog.max_alive_in_backward == 1
    assert build_program(MODEL, Scenario(Policy.BACKWARD_PRE)).max_alive_in_backward == 2
    stalled = step_us(lim, ag_bwd=6, rs=0)
    assert stalled == pytest.approx(step_us(Scenario(Policy.BACKWARD_POST), ag_bwd=6, rs=0))
    assert stalled > step_us(Scenario(Policy.BACKWARD_PRE), ag_bwd=6, rs=0)


def test_forward_prefetch_keeps_two_units_alive() -> None:
    assert build_program(MODEL, Scenario(Policy.NONE)).max_alive_units == 1
    prog = build_program(MODEL, Scenario(Policy.NONE, forward_prefetch=True))
    assert prog.max_alive_units == 2
    # forward: AG 6, fwd 10 each; with prefetch only the first AG is exposed (6 + 4 × 10)
    rep = replay(prog, {0: times(bwd_us=0, fwd_us=10)}, transfers(prog, 0, 0, ag_fwd=6))
    assert rep.step_time_us[0] == pytest.approx(46)


def test_collective_waits_for_the_slowest_peer() -> None:
    # rank 1 computes 4 µs longer per unit backward: every reduction starts when rank 1
    # issues it, and rank 0's comm op includes the peer wait.
    prog = build_program(MODEL, Scenario(Policy.NONE))
    rep = replay(prog, {0: times(), 1: times(bwd_us=14)}, transfers(prog, 6, 0))
    assert rep.step_time_us[0] == pytest.approx(rep.step_time_us[1])
    assert rep.step_time_us[1] == pytest.approx(4 * (6 + 14))
    m = replay_metrics([rep], world_size=2).set_index("rank")
    assert m.loc[0, "nccl_wait_us"] > m.loc[1, "nccl_wait_us"]
    # the analysis reads the replay: rank 0's step is its compute plus what it waited
    assert m.loc[0, "step_time_us"] == pytest.approx(rep.step_time_us[0])
    assert m.loc[0, "compute_us"] + m.loc[0, "nccl_wait_us"] == pytest.approx(
        m.loc[0, "step_time_us"]
    )


def test_contention_slows_compute_while_queue_busy() -> None:
    # 10 µs of work at half speed during [0, 10): 5 done by 10, the other 5 by 15
    assert _stretch(0.0, 10.0, [(0.0, 10.0)], 1.0) == pytest.approx(15.0)
    assert _stretch(0.0, 10.0, [(20.0, 30.0)], 1.0) == pytest.approx(10.0)
    assert _stretch(0.0, 10.0, [(0.0, 10.0)], 0.0) == pytest.approx(10.0)


def test_scenario_validation() -> None:
    with pytest.raises(ValueError, match="limit_all_gathers"):
        Scenario(limit_all_gathers=0)
    with pytest.raises(ValueError, match="not both"):
        Scenario(link_gbit=1.0, bandwidth_scale=2.0)


def test_prefetch_depth_two_gathers_two_units_ahead() -> None:
    # backward_pre, depth 2 (torch FSDP2's set_modules_to_backward_prefetch with 2 modules):
    # the root's backward prefetches u3 and u2; u3's prefetches u1; u2's u0
    prog = build_program(MODEL, Scenario(Policy.BACKWARD_PRE, prefetch_depth=2))
    bwd = [(c.phase.value, c.unit) for c in prog.collectives if c.phase is not Phase.AG_FWD]
    assert bwd == [
        ("ag_bwd", "u3"), ("ag_bwd", "u2"), ("ag_bwd", "u1"), ("rs", "u3"), ("ag_bwd", "u0"),
        ("rs", "u2"), ("rs", "u1"), ("rs", "u0"), ("rs", "root"),
    ]  # fmt: skip
    assert prog.max_alive_in_backward == 3
