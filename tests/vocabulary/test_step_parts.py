"""Every phase but a copy and the rate limiter lies in a part of the step, and a wait lies in
the part of what it waits on: the findings name where their evidence lies from the table's
``part`` column (a hand-kept map in the findings had missed the TP and replica phases)."""

from __future__ import annotations

from overlapscope.phases import COPY_PHASES, STEP_PARTS, Phase, step_part


def test_every_phase_but_copies_and_the_limiter_has_a_part() -> None:
    unplaced = {p for p in Phase if p.part is None}
    copies = set(COPY_PHASES) | {p.wait for p in COPY_PHASES}
    assert unplaced == copies | {Phase.LIMITER}
    assert {p.part for p in Phase} - {None} == set(STEP_PARTS)


def test_a_wait_lies_in_the_part_of_what_it_waits_on() -> None:
    for phase in Phase:
        if phase.awaited is not None:
            assert phase.part == phase.awaited.part, phase


def test_step_part_reads_a_phase_column_value() -> None:
    assert step_part("tp_fwd") == "forward"
    assert step_part("ar_rep.wait") == "backward"
    assert step_part("optim") == "optimizer"
    assert step_part("h2d") is None
    assert step_part("no such phase") is None
    assert step_part(float("nan")) is None
