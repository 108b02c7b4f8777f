"""Agreement with HTA on real multi-GPU NCCL traces (../shared/external-traces)."""

from __future__ import annotations

from pathlib import Path

import pytest

from overlapscope.analysis import analyze
from overlapscope.analysis.hta_report import HtaStatus, hta_available, run_hta
from overlapscope.trace.loader import load_run

EXTERNAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "external-traces"

# HTA 0.5.0 get_comm_comp_overlap with include_last_profiler_step=True, from the README there.
HTA_OVERLAP_WITH_LAST_STEP = {
    "hta-nccl-parser-config-rank0.json.gz": (0, 15.14),
    "hta-trace-diff-test-rank1.json.gz": (1, 69.07),
    "hta-timeline-sampled-rank0.json.gz": (0, 14.95),
}

# HTA 0.5.0 itself emits pandas deprecation warnings; they are not ours.
pytestmark = pytest.mark.filterwarnings("ignore::Warning:hta")

needs_traces = pytest.mark.skipif(
    not EXTERNAL.is_dir(), reason=f"external traces not found at {EXTERNAL.resolve()}"
)


def test_readme_figures_are_the_ones_we_check():
    if not (EXTERNAL / "README.md").is_file():
        pytest.skip("external-traces README not present")
    readme = (EXTERNAL / "README.md").read_text()
    for name, (_, pct) in HTA_OVERLAP_WITH_LAST_STEP.items():
        assert name in readme and f"/ {pct:.2f}" in readme


@needs_traces
@pytest.mark.parametrize("name", sorted(HTA_OVERLAP_WITH_LAST_STEP))
def test_overlap_matches_hta_readme_within_half_a_point(name):
    rank, hta_pct = HTA_OVERLAP_WITH_LAST_STEP[name]
    a = analyze(load_run(EXTERNAL / name))
    row = a.ranks.set_index("rank").loc[rank]
    assert abs(row["overlap_pct"] - hta_pct) <= 0.5, (row["overlap_pct"], hta_pct)
    assert row["compute_source"] == "gpu_kernels"
    assert a.units["kind"].notna().all()


@needs_traces
@pytest.mark.skipif(
    not hta_available(), reason="HTA not installed (pip install HolisticTraceAnalysis==0.5.0)"
)
def test_live_hta_agrees_and_reports_its_steps():
    name = "hta-timeline-sampled-rank0.json.gz"
    run = load_run(EXTERNAL / name)
    report = run_hta(run)
    assert report.status == HtaStatus.RAN
    ours = float(analyze(run).ranks.iloc[0]["overlap_pct"])
    assert abs(report.overlap_pct[0] - ours) <= 0.5
    assert report.counted_steps[0] == [551, 552]
    assert report.temporal is not None and report.temporal["idle_time_us"].iloc[0] > 0


def test_hta_is_not_run_on_cpu_traces(tmp_path):
    from tests.trace.kineto import gloo, step, trace, write

    p = write(tmp_path / "t.json", trace(0, 1, [step(1, 0, 10), gloo("all_gather", 1, 2, 4)]))
    report = run_hta(load_run(p))
    assert report.status == HtaStatus.NOT_APPLICABLE


@needs_traces
@pytest.mark.skipif(
    not hta_available(), reason="HTA not installed (pip install HolisticTraceAnalysis==0.5.0)"
)
@pytest.mark.parametrize("name", sorted(HTA_OVERLAP_WITH_LAST_STEP))
def test_live_hta_without_ns_rounding_agrees_to_the_hundredth(name, monkeypatch):
    # HTA rounds float timestamps to whole µs unless told not to; without rounding it
    # measures the same intervals we do.
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    rank, _ = HTA_OVERLAP_WITH_LAST_STEP[name]
    run = load_run(EXTERNAL / name)
    report = run_hta(run)
    assert report.status == HtaStatus.RAN and not report.ns_rounding
    ours = float(analyze(run).ranks.set_index("rank").loc[rank, "overlap_pct"])
    assert report.overlap_pct[rank] == pytest.approx(ours, abs=0.006)
