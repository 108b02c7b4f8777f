"""Activation checkpointing and CPU offload: their phases in the trace (recompute inside the
backward all-gather window, copies around the collectives), in ``overlapscope analyze``, and
the memory checkpointing saves (run.json)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import make_runs, overlapscope_cmd
from tests.engine.test_trace_contract import Interval, load_rank

pytestmark = pytest.mark.multirank

LAYERS = 3
COMMON = ["--nproc", "2", "--policy", "backward_pre", "--layers", str(LAYERS), "--dim", "128",
          "--heads", "4", "--seq-len", "256", "--global-batch", "8", "--steps", "4",
          "--profile-wait", "1", "--profile-warmup", "1", "--profile-active", "2"]  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    variants = {
        "plain": [],  # the defaults: no checkpointing, no offload
        "levers": ["--checkpoint-units", "all", "--cpu-offload"],
    }
    return make_runs(tmp_path_factory.mktemp("levers"), COMMON, variants)


def _first(events: list[Interval], name: str, after: float) -> Interval:
    return next(e for e in events if e.name == name and e.start >= after)


@pytest.mark.parametrize("rank", [0, 1])
def test_recompute_runs_inside_the_backward_all_gather_window(
    runs: dict[str, Path], rank: int
) -> None:
    events = load_rank(runs["levers"], rank)
    recomputes = [e for e in events if e.name.startswith("ovs/recompute/")]
    assert len(recomputes) == 2 * LAYERS  # every unit, both profiled steps
    for rc in recomputes:
        unit = rc.name.split("/")[2]
        waits = [e for e in events if e.name == f"ovs/ag_bwd.wait/{unit}" and e.end <= rc.start]
        assert waits, f"{rc.name} before its all-gather was waited for"
        _first(events, f"ovs/rs/{unit}", rc.end)  # its gradients are reduced after it
        early = [
            e for e in events if e.name == f"ovs/rs/{unit}" and waits[-1].end <= e.start < rc.start
        ]
        assert not early, f"{rc.name} ran after its unit's reduce-scatter"
    assert not [e for e in load_rank(runs["plain"], rank) if "/recompute/" in e.name]


@pytest.mark.parametrize("rank", [0, 1])
def test_offload_copies_frame_every_collective(runs: dict[str, Path], rank: int) -> None:
    # By order, not by gap: a fresh host-to-device copy of the unit's shard between its
    # previous all-gather and this one, and a device-to-host copy of its gradient shard after
    # each reduce-scatter wait, before the unit gathers again.
    events = load_rank(runs["levers"], rank)
    for e in events:
        unit = e.name.split("/")[2] if e.name.count("/") >= 2 else ""
        gathers = [x for x in events if x.name in (f"ovs/ag_fwd/{unit}", f"ovs/ag_bwd/{unit}")]
        if e.name.startswith(("ovs/ag_fwd/", "ovs/ag_bwd/")):
            h2d = [x for x in events if x.name == f"ovs/h2d/{unit}" and x.end <= e.start]
            assert h2d, f"no h2d before {e.name}"
            before = [x for x in gathers if x.end <= e.start]
            assert not before or h2d[-1].start >= before[-1].end, f"no fresh h2d for {e.name}"
        if e.name.startswith("ovs/rs.wait/"):
            d2h = _first(events, f"ovs/d2h/{unit}", e.end)
            after = [x for x in gathers if x.start >= e.end]
            assert not after or d2h.end <= after[0].start, f"d2h of {unit} after it gathers again"


def test_checkpointing_lowers_peak_memory(runs: dict[str, Path]) -> None:
    plain = json.loads((runs["plain"] / "run.json").read_text())["peak_mem_bytes"]
    levers = json.loads((runs["levers"] / "run.json").read_text())["peak_mem_bytes"]
    for p, c in zip(plain, levers, strict=True):
        assert c < 0.8 * p, (plain, levers)


def test_analyze_reports_recompute_and_copies(runs: dict[str, Path]) -> None:
    proc = subprocess.run(
        overlapscope_cmd("analyze", str(runs["levers"]), "--json", "-", "--no-progress"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    levers = json.loads(proc.stdout)["levers"]
    units = {f"blocks.{i}" for i in range(LAYERS)}
    for rank in (0, 1):
        rows = [r for r in levers if r["rank"] == rank]
        for phase in ("recompute", "h2d", "d2h"):
            assert units <= {r["unit"] for r in rows if r["phase"] == phase}, (rank, phase)
        for r in rows:
            assert r["time_total_us"] > 0
            if r["phase"] == "recompute":
                assert r["exposed_total_us"] is None and r["hides_comm_total_us"] >= 0
            else:
                assert 0 <= r["exposed_total_us"] <= r["time_total_us"] + 1e-6
    # backward_pre: the next unit's all-gather runs under recompute + gradient compute
    hidden = [r["hides_comm_total_us"] for r in levers if r["phase"] == "recompute"]
    assert sum(h > 0 for h in hidden) >= len(hidden) / 2
    text = subprocess.run(
        overlapscope_cmd("analyze", str(runs["levers"]), "--no-progress"),
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "Memory levers" in text and "recompute" in text and "h2d" in text


def test_dashboard_timeline_legend_shows_the_new_phases(runs: dict[str, Path]) -> None:
    from dashboards.figures import step_panel, timeline_figure
    from dashboards.palette import PHASE_NAMES
    from overlapscope.analysis import analyze
    from overlapscope.trace.run.loader import load_run

    a = analyze(load_run(runs["levers"]))
    step = int(a.steps["step"].iloc[0])
    fig = timeline_figure([step_panel("levers", a.timeline, a.exposed, a.steps, step)])
    legend = {t.name for t in fig.data if t.showlegend is not False}
    for phase in ("recompute", "h2d", "d2h"):
        assert PHASE_NAMES[phase] in legend, (phase, legend)
