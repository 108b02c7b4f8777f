"""Figure builders on small hand-made analysis tables (and one 100k-row table)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dashboards import figures, palette
from dashboards.figures import (
    EXPOSED_PHASE,
    MAX_BARS,
    merge_close,
    step_panel,
    timeline_figure,
    window_bars,
)
from dashboards.tabs.ranks import ranks_figure
from dashboards.tabs.tradeoff import tradeoff_figure
from dashboards.tabs.units import units_figure

from .helpers import timeline

STEPS = pd.DataFrame(
    {
        "rank": [0, 1, 0, 1],
        "step": [2, 2, 3, 3],
        "start_us": [1000.0, 1010.0, 3000.0, 3000.0],
        "end_us": [2000.0, 2100.0, 4000.0, 4000.0],
    }
)
TIMELINE = timeline(
    [
        (0, 2, "compute", "fwd", "blocks.0", 1000, 1500, -1),
        (0, 2, "comm", "ag_fwd", "blocks.0", 1100, 1300, 2 * 2**20),
        (0, 2, "wait", "ag_fwd.wait", "blocks.0", 1050, 1300, -1),
        (1, 2, "comm", "rs", "blocks.0", 1600, 1900, 2**20),
        (0, 3, "compute", "bwd", "blocks.0", 3000, 3500, -1),
    ]
)
EXPOSED = pd.DataFrame(
    {
        "rank": [0, 0, 1],
        "start_us": [1100.0, 3100.0, 1500.0],
        "end_us": [1200.0, 3200.0, 2500.0],
        "dur_us": [100.0, 100.0, 1000.0],
    }
)


def _traces(fig: object) -> dict[str, object]:
    return {t.legendgroup: t for t in fig.data}  # type: ignore[attr-defined]


def test_step_panel_keeps_the_step_and_clips_exposed_to_its_window() -> None:
    panel = step_panel("run", TIMELINE, EXPOSED, STEPS, 2)
    assert set(panel.timeline["step"]) == {2}
    assert panel.origin_us == 1000.0
    # rank 1's exposed interval runs past the step end (2100): clipped.
    assert panel.exposed["end_us"].tolist() == [1200.0, 2100.0]
    with pytest.raises(ValueError, match="step 7"):
        step_panel("run", TIMELINE, EXPOSED, STEPS, 7)


def test_timeline_draws_lanes_per_rank_in_ms_from_the_step_start() -> None:
    fig = timeline_figure([step_panel("run", TIMELINE, EXPOSED, STEPS, 2)])
    traces = _traces(fig)
    assert set(traces) == {"fwd", "ag_fwd", "ag_fwd.wait", "rs", EXPOSED_PHASE}
    ag = traces["ag_fwd"]
    assert list(ag.y) == ["rank 0 · all-gather"]
    assert list(ag.base) == pytest.approx([0.1])  # 1100 µs - 1000 µs
    assert list(ag.x) == pytest.approx([0.2])
    assert ag.customdata[0][0] == "blocks.0"
    assert ag.customdata[0][3] == pytest.approx(2.0)  # MiB
    assert ag.marker.color == palette.phase_colour("ag_fwd")
    assert list(traces["rs"].y) == ["rank 1 · reduce-scatter"]
    assert list(traces["ag_fwd.wait"].y) == ["rank 0 · wait"]
    ex = traces[EXPOSED_PHASE]
    assert list(ex.y) == ["rank 0 · exposed comm", "rank 1 · exposed comm"]
    assert ex.marker.color == palette.EXPOSED_COLOUR
    # rank 0 on top: the category array is bottom-to-top.
    order = list(fig.layout.yaxis.categoryarray)
    assert order[-1] == "rank 0 · compute" and order[0] == "rank 1 · exposed comm"
    assert fig.layout.xaxis.title.text == "time since step start (ms)"


def test_two_runs_share_one_time_axis_and_one_legend_entry_per_phase() -> None:
    a = step_panel("serial", TIMELINE, EXPOSED, STEPS, 2)
    b = step_panel("pipelined", TIMELINE, EXPOSED, STEPS, 3)
    fig = timeline_figure([a, b])
    assert [ann.text for ann in fig.layout.annotations] == ["serial", "pipelined"]
    assert fig.layout.xaxis.matches == "x2" or fig.layout.xaxis2.matches == "x"
    legend = [t.legendgroup for t in fig.data if t.showlegend]
    assert len(legend) == len(set(legend))


@pytest.mark.parametrize(
    ("rows", "tol", "expected"),
    [
        pytest.param([(0, 1), (1.05, 2)], 0.1, [(0, 2, 2)], id="gap-under-tolerance-merges"),
        pytest.param([(0, 1), (1.5, 2)], 0.1, [(0, 1, 1), (1.5, 2, 1)], id="gap-over-tolerance"),
        pytest.param([(0, 5), (1, 2), (4, 6)], 0.0, [(0, 6, 3)], id="nested-and-overlapping"),
        pytest.param([(3, 4), (0, 1)], 0.0, [(0, 1, 1), (3, 4, 1)], id="unsorted-input"),
    ],
)
def test_merge_close(
    rows: list[tuple[float, float]], tol: float, expected: list[tuple[float, float, int]]
) -> None:
    bars = pd.DataFrame(
        {
            "rank": 0,
            "lane": "compute",
            "phase": "fwd",
            "unit": "u",
            "t0": [r[0] for r in rows],
            "t1": [r[1] for r in rows],
            "dur_us": 1.0,
            "bytes": 0,
            "n": 1,
            "y": "rank 0 · compute",
        }
    )
    merged = merge_close(bars, tol)
    assert list(zip(merged["t0"], merged["t1"], merged["n"], strict=True)) == expected


def test_merge_close_never_merges_across_lanes_or_phases() -> None:
    bars = pd.DataFrame(
        {
            "rank": [0, 0, 1],
            "lane": ["compute", "compute", "compute"],
            "phase": ["fwd", "bwd", "fwd"],
            "unit": "u",
            "t0": [0.0, 0.5, 0.2],
            "t1": [1.0, 1.5, 1.2],
            "dur_us": 1.0,
            "bytes": 0,
            "n": 1,
            "y": ["rank 0 · compute", "rank 0 · compute", "rank 1 · compute"],
        }
    )
    assert len(merge_close(bars, 10.0)) == 3


def big_timeline(num_events: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``num_events`` intervals of one step over 4 ranks, all phases, plus exposed intervals."""
    rng = np.random.default_rng(seed)
    phases = ["fwd", "bwd", "ag_fwd", "ag_bwd", "rs", "ag_fwd.wait", "ag_bwd.wait", "rs.wait"]
    lanes = {"fwd": "compute", "bwd": "compute", "ag_fwd": "comm", "ag_bwd": "comm", "rs": "comm"}
    phase = rng.choice(phases, num_events)
    start = rng.uniform(0, 1e6, num_events)
    dur = rng.exponential(20.0, num_events)
    df = timeline([])
    df = pd.DataFrame(
        {
            "rank": rng.integers(0, 4, num_events),
            "step": 5,
            "lane": pd.Categorical([lanes.get(p, "wait") for p in phase]),
            "phase": pd.Categorical(phase),
            "unit": pd.Categorical(rng.choice([f"layers.{i}" for i in range(32)], num_events)),
            "kind": None,
            "name": "x",
            "tid": 1,
            "on_gpu": False,
            "start_us": start,
            "end_us": start + dur,
            "dur_us": dur,
            "bytes": rng.integers(-1, 1 << 24, num_events),
            "exposed_us": 0.0,
        }
    )[df.columns]
    ex_start = np.sort(rng.uniform(0, 1e6, 5000))
    exposed = pd.DataFrame(
        {
            "rank": rng.integers(0, 4, 5000),
            "start_us": ex_start,
            "end_us": ex_start + 10.0,
            "dur_us": 10.0,
        }
    )
    return df, exposed


def test_a_100k_event_step_gives_a_bounded_drawable_figure() -> None:
    tl, exposed = big_timeline(100_000)
    steps = pd.DataFrame({"rank": [0], "step": [5], "start_us": [0.0], "end_us": [1.1e6]})
    panel = step_panel("big", tl, exposed, steps, 5)
    fig = timeline_figure([panel])
    # One trace per phase + exposed, whatever the number of events.
    assert len(fig.data) == tl["phase"].nunique() + 1
    num_bars = sum(len(t.x) for t in fig.data)
    assert num_bars <= MAX_BARS
    # Every event is still accounted for by a drawn (possibly merged) bar.
    assert sum(int(n) for t in fig.data for n in t.customdata[:, 4]) == 105_000
    fig.to_json()  # serialisable: what Dash sends to the browser


def test_zoomed_window_draws_only_what_it_shows() -> None:
    tl, exposed = big_timeline(100_000)
    steps = pd.DataFrame({"rank": [0], "step": [5], "start_us": [0.0], "end_us": [1.1e6]})
    panel = step_panel("big", tl, exposed, steps, 5)
    full = figures._bars(panel)
    window = (100.0, 110.0)  # ms
    drawn = window_bars(full, window, MAX_BARS)
    assert ((drawn["t1"] >= 100.0) & (drawn["t0"] <= 110.0)).all()
    inside = full[(full["t1"] >= 100.0) & (full["t0"] <= 110.0)]
    assert int(drawn["n"].sum()) == len(inside)
    fig = timeline_figure([panel], window_ms=window)
    assert list(fig.layout.xaxis.range) == [100.0, 110.0]


def _units() -> pd.DataFrame:
    rows = [
        (0, "blocks.10", "ag_bwd", "all_gather", 1000.0),
        (1, "blocks.10", "ag_bwd", "all_gather", 3000.0),
        (0, "blocks.2", "rs", "reduce_scatter", 500.0),
        (0, "blocks.2", "rs", "all_reduce", 250.0),  # same phase, another kind: summed
        (0, "root", "ag_fwd", "all_gather", 100.0),
        (0, "root", "fwd", "other", 9999.0),  # not communication
    ]
    return pd.DataFrame(rows, columns=["rank", "unit", "phase", "kind", "exposed_per_step_us"])


def test_units_bars_are_mean_over_ranks_in_ms_per_step() -> None:
    fig = units_figure([("run", _units())])
    bars = {t.legendgroup: dict(zip(t.x, t.y, strict=True)) for t in fig.data}
    assert set(bars) == {"ag_fwd", "ag_bwd", "rs"}
    assert bars["ag_bwd"]["blocks.10"] == pytest.approx(2.0)
    assert bars["rs"]["blocks.2"] == pytest.approx(0.75)
    assert bars["ag_fwd"]["root"] == pytest.approx(0.1)
    assert list(fig.data[0].x) == ["root", "blocks.2", "blocks.10"]
    assert "ms per step" in fig.layout.yaxis.title.text


def test_units_side_by_side_for_two_runs() -> None:
    fig = units_figure([("a", _units()), ("b", _units())])
    assert [a.text for a in fig.layout.annotations] == ["a", "b"]
    assert sum(t.showlegend for t in fig.data) == 3


def test_tradeoff_one_point_per_run() -> None:
    table = pd.DataFrame(
        {
            "run": ["none", "backward_pre"],
            "policy": ["none", "backward_pre"],
            "step_ms": [400.0, 300.0],
            "throughput_tok_s": [10.0, 13.0],
            "exposed_comm_per_step_ms": [200.0, 90.0],
            "peak_mem_mib": [50.0, 70.0],
        }
    )
    fig = tradeoff_figure(table)
    assert [(t.x[0], t.y[0]) for t in fig.data] == [(50.0, 400.0), (70.0, 300.0)]
    assert "peak memory" in fig.layout.xaxis.title.text
    assert "step time" in fig.layout.yaxis.title.text


def test_ranks_heatmap_has_peer_wait_per_rank_and_marks_stragglers() -> None:
    collectives = pd.DataFrame(
        {
            "group": "g",
            "step": [2, 2],
            "seq": [0, 1],
            "kind": "all_gather",
            "unit": ["root", "blocks.0"],
            "phase": ["ag_fwd", "ag_fwd"],
            "start_us": [0.0, 100.0],
            "transfer_us": [10.0, 20.0],
            "straggler_rank": [1, 0],
            "straggler_lag_us": [5.0, 7.0],
        }
    )
    cr = pd.DataFrame(
        {
            "rank": [0, 1, 0, 1],
            "group": "g",
            "step": 2,
            "seq": [0, 0, 1, 1],
            "dur_us": [15.0, 10.0, 20.0, 27.0],
            "peer_wait_us": [5000.0, 0.0, 0.0, 7000.0],
        }
    )
    fig = ranks_figure(collectives, cr)
    heat = next(t for t in fig.data if t.type == "heatmap")
    assert list(heat.y) == ["rank 0", "rank 1"]
    assert np.asarray(heat.z).tolist() == [[5.0, 0.0], [0.0, 7.0]]
    stragglers = next(t for t in fig.data if t.type == "scatter")
    assert list(stragglers.y) == ["rank 1", "rank 0"]
    transfer = next(t for t in fig.data if t.type == "bar")
    assert list(transfer.y) == pytest.approx([0.01, 0.02])


def test_empty_inputs_give_a_message_not_an_error() -> None:
    assert timeline_figure([]).layout.annotations[0].text == "no run selected"
    assert (
        "no collectives" in ranks_figure(pd.DataFrame(), pd.DataFrame()).layout.annotations[0].text
    )
