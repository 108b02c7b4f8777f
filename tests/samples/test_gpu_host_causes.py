"""Where the GPU waits, on real GPU traces with a known host cause each (issue 30 points 1,
4 and 7; ``traces/gpu-torch-fsdp2-*``, an H100, made by ``scripts/gpu-check-host-causes.sh``).

torch FSDP2 at world size 1, the loop never waiting for the GPU at a step's end, with one
reason for the GPU to wait on its host put in on purpose: a single-process DataLoader whose
samples take 1 ms each, a ``.item()`` after each of the 8 blocks' forward, 32 small units
at batch 2. Each expectation is what the configuration means, compared with the reference
run beside it (the same model and batch without the cause), never a figure of ours copied
back. The figures against HTA's are in test_gpu_fixtures.py and test_gpu_idle_hta.py.
"""

from __future__ import annotations

from functools import cache

import pandas as pd
import pytest

from overlapscope.analysis import RunAnalysis, analyze
from overlapscope.analysis.findings import FindingKind
from overlapscope.analysis.hta.report import unlaunched
from overlapscope.trace.run.loader import load_run
from tests.conftest import REPO

TRACES = REPO / "traces"
REFERENCE = "gpu-torch-fsdp2-free-running"
LOADER = "gpu-torch-fsdp2-slow-loader"
ITEM = "gpu-torch-fsdp2-item-per-block"
SMALL = "gpu-torch-fsdp2-many-small-units"
BLOCKS = 8


@cache
def _analysis(name: str) -> RunAnalysis:
    return analyze(load_run(TRACES / name))


def _rank(name: str) -> pd.Series:
    return _analysis(name).ranks.iloc[0]


def _host_finding(name: str):  # type: ignore[no-untyped-def]
    findings = [f for f in _analysis(name).findings if f.kind is FindingKind.HOST_STARVED]
    assert findings, name
    return findings[0]


@pytest.mark.parametrize("name", [REFERENCE, LOADER, ITEM])
def test_the_warm_ups_work_is_left_out_of_the_profiled_steps(name: str) -> None:
    """The loop runs ahead, so step 2's last kernels (launched in the profiler's warm-up,
    their CPU events not kept) run at step 3's start: counted in no step, with one line."""
    run = load_run(TRACES / name)
    lines = [w for w in run.warnings if "no launch in the trace" in w]
    assert len(lines) == 1 and lines[0].endswith("0 of them inside the profiled steps")
    ev, lost = run.events, unlaunched(run.events)
    first = ev.loc[ev["on_gpu"] & ~lost & (ev["step"] >= 0), "ts_us"].min()
    assert lost.any() and (ev.loc[lost, "step"] == -1).all()
    assert (ev.loc[lost, "end_us"] <= first).all()


def test_the_reference_is_set_by_its_device() -> None:
    r = _rank(REFERENCE)
    assert r["compute_per_step_us"] > 0.9 * r["step_time_per_step_us"]
    assert _host_finding(REFERENCE).stake_us < 0.05 * r["step_time_per_step_us"]


def test_a_slow_data_loader_is_named_with_its_lever() -> None:
    ref, slow = _rank(REFERENCE), _rank(LOADER)
    assert slow["idle_host_bound_per_step_us"] > 4 * ref["idle_host_bound_per_step_us"]
    finding = _host_finding(LOADER)
    assert finding.kind is FindingKind.HOST_STARVED
    assert "the launching thread was doing (each stretch named by the innermost CPU" in (
        finding.summary
    )
    assert "data loading 83% (enumerate(DataLoader)#" in finding.summary
    assert finding.change.startswith("more data-loader workers and pinned memory")
    ops = _analysis(LOADER).host_ops
    top = ops.sort_values("dur_total_us", ascending=False).iloc[0]
    assert (top["cause"], top["host_activity"]) == ("host_bound", "data loading")
    assert "DataLoader" in top["host_op"]


def test_an_item_per_block_is_a_sync_gap_per_block() -> None:
    """Each .item() drains the GPU; the gap after it is the sync's: 8 more per step than
    the reference's (whose two are the pageable input copy, a synchronous copy)."""

    def per_step(name: str) -> pd.Series:
        gaps = _analysis(name).idle_gaps
        return gaps[gaps["cause"] == "sync"].groupby("step").size()

    ref, item = per_step(REFERENCE), per_step(ITEM)
    assert sorted(item.index) == sorted(ref.index) == [3, 4]
    assert ((item - ref) == BLOCKS).all()
    assert _rank(ITEM)["idle_sync_per_step_us"] > 2 * _rank(REFERENCE)["idle_sync_per_step_us"]
    finding = _host_finding(ITEM)
    assert finding.kind is FindingKind.HOST_STARVED and "sync " in finding.summary
    assert "no host syncs in the step" in finding.change


def test_many_small_units_starve_the_gpu() -> None:
    r = _rank(SMALL)
    assert r["idle_host_bound_per_step_us"] > 0.9 * r["step_time_per_step_us"]
    finding = _host_finding(SMALL)
    assert finding.kind is FindingKind.HOST_STARVED
    assert "GPU ops per step, one launched every" in finding.summary
    # GPU compute is a small share of the step: more work per launch first, then FSDP2's
    # own words for fewer, larger units
    assert finding.change.startswith("more work per launch: a larger batch per GPU")
    assert finding.levers[1].lever.startswith("fully_shard fewer, larger modules")
    assert not [w for w in _analysis(SMALL).warnings if "no launch in the trace" in w]
