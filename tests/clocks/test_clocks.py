"""Clock offsets estimated from the collectives: known answers, then injection into real runs
(offsets and drifts added to whole ranks must come back, and cross-rank figures must not move).

Accuracy of the estimator on recorded data is asserted here; its speed is in
benchmarks/clock_alignment.py, never in a test.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from overlapscope.analysis.api import analyze
from overlapscope.analysis.clocks.alignment import (
    MAX_DRIFT_PPM,
    MIN_COLLECTIVES,
    align,
    estimate_offsets,
    fit_offset,
    offset_at,
)
from overlapscope.analysis.collectives.matched import matched_ends
from overlapscope.trace.run.loader import RunTraces, load_run
from tests.clocks.conftest import inject, on_separate_hosts
from tests.conftest import REPO

SAMPLES = REPO / "traces"


@functools.cache
def sample(name: str) -> RunTraces:
    """A shipped run, loaded once (the tests never change it: RunTraces is frozen and the
    analysis is pure), as if each rank had its own host, so its clock is aligned."""
    return on_separate_hosts(load_run(SAMPLES / name))


def tolerance(injected: np.ndarray) -> np.ndarray:
    """The issue's bar: 20 µs or 5% of the injected value, whichever is larger."""
    return np.maximum(20.0, 0.05 * np.abs(injected))


def recovered(base: RunTraces, moved: RunTraces, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(offset recovered at each collective of ``rank``, its recorded time): the moved run's
    estimate (at the moved times) minus the recorded run's (at the recorded times)."""
    ends = matched_ends(base.events)[rank].dropna().to_numpy()
    moved_ends = matched_ends(moved.events)[rank].dropna().to_numpy()
    off_base = estimate_offsets(base.events)
    off_moved = estimate_offsets(moved.events)
    ranks = np.full(len(ends), rank)
    return offset_at(off_moved, ranks, moved_ends) - offset_at(off_base, ranks, ends), ends


def test_fit_recovers_a_known_offset_and_drift() -> None:
    rng = np.random.default_rng(1)
    x = np.sort(rng.uniform(0, 10e6, 300))  # 10 s of collectives
    noise = rng.normal(0, 5, 300) + np.where(rng.random(300) < 0.15, rng.exponential(2000, 300), 0)
    offset, slope, center, spread = fit_offset(x, 5000 + 40e-6 * (x - 5e6) + noise)
    assert abs(offset + slope * (5e6 - center) - 5000) < 5
    assert slope * 1e6 == pytest.approx(40, abs=1)
    assert spread < 20


def test_fit_adds_no_drift_to_noise() -> None:
    rng = np.random.default_rng(2)
    x = np.sort(rng.uniform(0, 2e6, 40))
    offset, slope, _, _ = fit_offset(x, 300 + rng.normal(0, 500, 40))
    assert slope == 0.0 and abs(offset - 300) < 300


# the CPU sweep's runs, and the GPU runs of two ranks (staged over gloo: traces/gpu-engine-gloo2-*)
TWO_RANK_RUNS = [
    "backward_pre",
    "none",
    "backward_post",
    "backward_pre+limit=2",
    "gpu-engine-gloo2-none",
    "gpu-engine-gloo2-backward_pre",
]


@pytest.mark.parametrize("name", TWO_RANK_RUNS)
@pytest.mark.parametrize(
    ("offset_us", "drift_ppm"),
    [(50.0, 0.0), (-50.0, 0.0), (1000.0, 0.0), (-20000.0, 0.0), (20000.0, 50.0), (-5000.0, -100.0)],
)
def test_injected_offset_is_recovered_in_sample_runs(
    name: str, offset_us: float, drift_ppm: float
) -> None:
    base = sample(name)
    moved = inject(base, {1: (offset_us, drift_ppm)})
    got, at = recovered(base, moved, 1)
    want = offset_us + drift_ppm * 1e-6 * at
    assert (np.abs(got - want) <= tolerance(want)).all()


def matched(run: RunTraces, align_clocks: bool = True) -> pd.DataFrame:
    c = analyze(run, align_clocks=align_clocks).collectives
    return c[c["num_ranks"] >= 2].reset_index(drop=True)


def cross_rank_figures(c: pd.DataFrame) -> dict[str, float]:
    straggler = c["straggler_rank"].value_counts()
    return {
        "straggler": float(straggler.index[0]),
        "share": float(straggler.iloc[0]) / len(c),
        "median_lag_us": float(c["straggler_lag_us"].median()),
        "total_skew_us": float(c["straggler_lag_us"].sum()),
        "peer_wait_us": float(c["peer_wait_us"].sum()),
    }


@pytest.mark.parametrize(("offset_us", "drift_ppm"), [(20000.0, 0.0), (-20000.0, 0.0), (50.0, 0)])
def test_straggler_lag_and_skew_do_not_move(offset_us: float, drift_ppm: float) -> None:
    base = sample("backward_pre")
    moved = inject(base, {1: (offset_us, drift_ppm)})
    want = cross_rank_figures(matched(base))
    got = cross_rank_figures(matched(moved))
    assert got["straggler"] == want["straggler"]
    for key in ("share", "median_lag_us", "total_skew_us", "peer_wait_us"):
        assert got[key] == pytest.approx(want[key], rel=0.02), key
    if abs(offset_us) > 1000:
        # without alignment the same shift changes who is late (the bug this fixes)
        raw = cross_rank_figures(matched(moved, align_clocks=False))
        assert raw["median_lag_us"] > 10 * want["median_lag_us"]


def test_undetectable_drift_moves_only_collectives_within_its_error() -> None:
    """20 ppm over this 1.75 s run is below what its noisy ends can resolve (the drift is
    not fitted, docs/ANALYSIS.md): the residual error is at most 20 ppm * span / 2 = 18 µs,
    so only collectives whose two ranks start closer than that may change straggler."""
    base = sample("backward_pre")
    moved = inject(base, {1: (-20000.0, 20.0)})
    want, got = matched(base), matched(moved)
    span = float(base.events["end_us"].max() - base.events["ts_us"].min())
    error = 20e-6 * span
    clear = want["straggler_lag_us"] > error
    assert clear.sum() >= len(want) // 2
    assert (got.loc[clear, "straggler_rank"] == want.loc[clear, "straggler_rank"]).all()
    a, b = cross_rank_figures(want), cross_rank_figures(got)
    assert a["straggler"] == b["straggler"]
    for key in ("total_skew_us", "peer_wait_us"):
        assert b[key] == pytest.approx(a[key], rel=0.02), key


def test_four_ranks_recover_each_rank(four_rank_run: Path) -> None:
    base = on_separate_hosts(load_run(four_rank_run))
    shifts = {1: (50.0, 0.0), 2: (-3000.0, 0.0), 3: (20000.0, 30.0)}
    moved = inject(base, shifts)
    for rank, (offset_us, ppm) in shifts.items():
        got, at = recovered(base, moved, rank)
        want = offset_us + ppm * 1e-6 * at
        assert (np.abs(got - want) <= tolerance(want)).all(), rank
    off = estimate_offsets(base.events)
    assert list(off["rank"]) == [0, 1, 2, 3] and off["aligned"].sum() == 3
    assert (off.loc[off["aligned"], "num_collectives"] >= MIN_COLLECTIVES).all()


def assert_same_host(run: RunTraces) -> None:
    """One host, one clock: causality (analysis/clocks/bounds.py) leaves 0 inside every rank's
    interval, and the estimate inside it too."""
    off = estimate_offsets(run.events)
    used = off[off["aligned"]]
    assert len(used) == len(off) - 1
    assert ((off["lo_us"] <= 0) & (off["hi_us"] >= 0)).all(), off
    assert ((used["lo_us"] <= used["offset_us"]) & (used["offset_us"] <= used["hi_us"])).all()
    assert (used["drift_ppm"].abs() <= MAX_DRIFT_PPM).all()


def test_fsdp_run_same_host_and_injection(fsdp2_run: Path) -> None:
    base = load_run(fsdp2_run)
    assert_same_host(base)
    moved = inject(base, {1: (-20000.0, 0.0)})
    got, at = recovered(base, moved, 1)
    assert (np.abs(got + 20000.0) <= tolerance(np.full(len(at), 20000.0))).all()


def test_own_runs_same_host(four_rank_run: Path) -> None:
    assert_same_host(load_run(four_rank_run))
    for name in ("backward_pre", "none", "backward_post", "backward_pre+limit=2"):
        assert_same_host(sample(name))
    for name in ("gpu-engine-gloo2-none", "gpu-engine-gloo2-backward_pre"):  # (an H200)
        assert_same_host(sample(name))


def test_too_few_collectives_keep_the_clock_with_one_warning() -> None:
    ev = sample("backward_pre").events
    comm_1 = ev.index[(ev["rank"] == 1) & (ev["seq"] >= 0)]
    thin = ev.drop(comm_1[MIN_COLLECTIVES - 1 :])
    aligned, off, warnings = align(thin)
    assert len(warnings) == 1 and "rank 1: clock not aligned" in warnings[0]
    assert not off.set_index("rank").loc[1, "aligned"]
    pd.testing.assert_frame_equal(aligned, thin)


def test_align_is_pure_and_moves_only_other_ranks() -> None:
    ev = sample("backward_pre").events
    before = ev.copy()
    aligned, off, _ = align(ev)
    pd.testing.assert_frame_equal(ev, before)
    r0 = (ev["rank"] == 0).to_numpy()
    assert np.array_equal(aligned["ts_us"].to_numpy()[r0], ev["ts_us"].to_numpy()[r0])
    shift = (ev["ts_us"] - aligned["ts_us"]).to_numpy()[~r0]
    assert np.allclose(shift, off.set_index("rank").loc[1, "offset_us"])
    assert np.allclose(aligned["end_us"] - aligned["ts_us"], ev["dur_us"])


def test_no_align_reports_offsets_but_keeps_clocks() -> None:
    run = sample("backward_pre")
    a = analyze(run, align_clocks=False)
    assert a.clocks is not None and not a.clocks["aligned"].any()
    assert a.to_json_dict()["clocks"]["applied"] is False
    b = analyze(run)
    assert b.to_json_dict()["clocks"]["applied"] is True
    assert not a.timeline.equals(b.timeline)


def test_a_fresh_run_names_each_ranks_host_and_its_bounds_contain_zero(
    four_rank_run: Path,
) -> None:
    """run.json names each rank's host; on one host the clocks are one, so causality
    (analysis/clocks/bounds.py) must leave 0 inside every rank's interval; every estimate is applied
    (one rule), and it lies inside its interval."""
    import socket

    run = load_run(four_rank_run)
    assert run.manifest is not None
    assert run.manifest.hosts == (socket.gethostname(),) * 4
    a = analyze(run)
    assert a.clocks_shared_host == socket.gethostname()
    off = a.clocks
    assert off is not None
    assert ((off["lo_us"] <= 0) & (off["hi_us"] >= 0)).all(), off
    used = off[off["aligned"]]
    assert len(used) == 3
    assert ((used["lo_us"] <= used["offset_us"]) & (used["offset_us"] <= used["hi_us"])).all()


def test_a_queued_point_to_point_collective_bounds_the_clock_from_its_issue() -> None:
    """The engine's gloo collectives are folded sends and receives (trace/recognize/p2p.py): one
    that
    was issued while the one before it on its thread was still in flight starts, in the
    trace, when that one ended, yet its sends left at its issue, and its peer may have
    finished before that start (the quick start's run: 243 µs, so the bounds excluded 0 on
    one host). Known answer: move rank 0's transfer of one all-gather past rank 1's end, as
    that queueing does; causality reads its issue range, and 0 stays inside."""
    ev = sample("backward_pre").events.copy()
    comm = ev[(ev["lane"] == "comm") & (ev["seq"] >= 0) & (ev["cat"] == "gloo_p2p")]
    key = ["group", "step", "seq"]
    both = comm.groupby(key, observed=True)["rank"].nunique()
    group, step, seq = both[both == 2].index[0]
    mine = comm[(comm["group"] == group) & (comm["step"] == step) & (comm["seq"] == seq)]
    r0, r1 = (mine.index[mine["rank"] == r][0] for r in (0, 1))
    late = max(ev.at[r1, "end_us"], ev.at[r0, "ts_us"]) + 50.0  # queued behind an earlier one
    ev.loc[r0, ["ts_us", "end_us"]] = late, max(ev.at[r0, "end_us"], late + 1.0)
    ev.loc[r0, "dur_us"] = ev.at[r0, "end_us"] - late
    off = estimate_offsets(ev)
    assert ((off["lo_us"] <= 0) & (off["hi_us"] >= 0)).all(), off
    starts_only = ev.drop(columns=["cat"]).assign(from_us=ev["ts_us"])  # its start alone
    off = estimate_offsets(starts_only)
    assert not ((off["lo_us"] <= 0) & (off["hi_us"] >= 0)).all(), off
