"""One rule for every clock (issue 30 point 6): an offset of ±50 µs to ±20 ms injected into
one rank of a 2-rank run (the shipped ones, on CPU and on a GPU), a 4-rank run and the torch FSDP1 and FSDP2 runs
gives the un-shifted run's findings. No threshold turns the correction on or off: the
estimate and the causal bounds move with the clock, so the aligned run is the same."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from overlapscope.analysis.api import RunAnalysis, analyze
from overlapscope.trace.run.loader import RunTraces, load_run
from tests.clocks.conftest import inject
from tests.conftest import REPO

SHIFTS_US = (50.0, -50.0, 1000.0, -1000.0, 20000.0, -20000.0)
SHIPPED = (
    *("backward_pre", "none", "backward_post", "backward_pre+limit=2"),
    *("gpu-engine-gloo2-none", "gpu-engine-gloo2-backward_pre"),  # (2 ranks on an H200)
)


@functools.cache
def shipped(name: str) -> RunTraces:
    return load_run(REPO / "traces" / name)


@functools.cache
def analysed(path: Path) -> RunAnalysis:
    return analyze(load_run(path))


def findings(a: RunAnalysis) -> list[tuple[str, int | None, str]]:
    return [(f.kind.value, f.rank, f.title) for f in a.findings]


def assert_same_findings(base: RunTraces, want: RunAnalysis, rank: int, shift: float) -> None:
    got = analyze(inject(base, {rank: (shift, 0.0)}))
    assert findings(got) == findings(want)
    # the same stakes, but for float rounding of the shifted times (a clock of 20 ms in µs
    # keeps ~1e-9 µs; the sums of a few hundred intervals ~1e-6)
    stakes = [f.stake_us for f in got.findings]
    assert stakes == pytest.approx([f.stake_us for f in want.findings], rel=1e-9, abs=1e-3)
    assert got.clocks is not None and want.clocks is not None
    moved = got.clocks.set_index("rank").loc[rank]
    kept = want.clocks.set_index("rank").loc[rank]
    for column in ("offset_us", "lo_us", "hi_us"):
        assert moved[column] - kept[column] == pytest.approx(shift, abs=1e-6), column
    assert moved["uncertainty_us"] == pytest.approx(kept["uncertainty_us"], abs=1e-6)


@pytest.mark.parametrize("shift", SHIFTS_US)
@pytest.mark.parametrize("name", SHIPPED)
def test_two_rank_runs(name: str, shift: float) -> None:
    base = shipped(name)
    assert_same_findings(base, analyze(base), 1, shift)


@pytest.mark.parametrize("shift", SHIFTS_US)
def test_four_rank_run(four_rank_run: Path, shift: float) -> None:
    assert_same_findings(load_run(four_rank_run), analysed(four_rank_run), 2, shift)


@pytest.mark.parametrize("shift", SHIFTS_US)
@pytest.mark.parametrize("which", ["fsdp1", "fsdp2"])
def test_torch_fsdp_runs(which: str, shift: float, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(f"{which}_run")
    assert_same_findings(load_run(path), analysed(path), 1, shift)
