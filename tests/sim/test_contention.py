"""Compute contention fitted across runs: where one run's busy fractions are all alike, runs
of other policies differ, and a run on a slow phase of the machine is not read as contention."""

from __future__ import annotations

import pandas as pd
import pytest

from overlapscope.sim.contention import fit_contention, fit_contention_across

SIZES = {f"blocks.{i}": 1 << 20 for i in range(4)}


def _run(bwd_us: float, busy: float, speed: float = 1.0) -> pd.DataFrame:
    """One run: 4 units, forward 10 ms (never overlapped), backward ``bwd_us`` at ``busy``;
    every duration × ``speed`` (the machine's pace during this run)."""
    rows = [("fwd", f"blocks.{i}", 10e3, 0.0) for i in range(4)]
    rows += [("bwd", f"blocks.{i}", bwd_us, busy) for i in range(4)]
    df = pd.DataFrame(rows, columns=["phase", "unit", "dur_us", "busy_frac"])
    return df.assign(dur_us=df["dur_us"] * speed)


def test_one_run_alone_cannot_tell_contention() -> None:
    # every backward unit overlaps a transfer: α cannot be told from the base duration
    assert fit_contention(_run(36e3, 1.0), SIZES) == 0.0


def test_runs_of_two_policies_give_the_slow_down() -> None:
    # none: backward with an idle queue, 30 ms; backward_pre: busy throughout, 36 ms
    assert fit_contention_across([_run(30e3, 0.0), _run(36e3, 1.0)], SIZES) == pytest.approx(0.2)


def test_a_slow_run_is_not_read_as_contention() -> None:
    # the backward_pre run happened on a phase of the machine 1.5x slower (its forward too)
    runs = [_run(30e3, 0.0), _run(36e3, 1.0, speed=1.5)]
    assert fit_contention_across(runs, SIZES) == pytest.approx(0.2)
    # and the same slow phase without any slow-down from communication: α = 0
    assert fit_contention_across([_run(30e3, 0.0), _run(30e3, 1.0, speed=1.5)], SIZES) == 0.0


def test_units_of_one_size_but_other_compute_keep_their_own_base() -> None:
    # two same-size units whose backward differs (30 and 40 ms with an idle queue), busy
    # 100 % and 50 % under the other policy: the slow-down is 0.2 for both, read between runs
    def run(a_us: float, a_busy: float, b_us: float, b_busy: float) -> pd.DataFrame:
        rows = [("fwd", "blocks.0", 10e3, 0.0), ("fwd", "blocks.1", 10e3, 0.0)]
        rows += [("bwd", "blocks.0", a_us, a_busy), ("bwd", "blocks.1", b_us, b_busy)]
        return pd.DataFrame(rows, columns=["phase", "unit", "dur_us", "busy_frac"])

    runs = [run(30e3, 0.0, 40e3, 0.0), run(36e3, 1.0, 44e3, 0.5)]
    assert fit_contention_across(runs, SIZES) == pytest.approx(0.2)
