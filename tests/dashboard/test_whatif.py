"""The what-if panel on the shipped sample runs: scenario controls, the matching measured run,
predicted tables and figure, and the view with its one-line errors (the calibration cache:
test_whatif_cache.py).

No numbers are hard-coded (the sample traces may be regenerated): structure and sanity only,
plus the simulator's self-replay property (a run predicted under its own configuration is
within 5% of its measured step time, as tests/sim asserts on a fresh run).
"""

from __future__ import annotations

import dataclasses
import math
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from dash import html

from dashboards import ids, palette, views
from dashboards.data import CalibrationError, RunRegistry, RunSource, discover_runs, read_manifest
from dashboards.figures import TimelinePanel, whatif_figure
from dashboards.tables import WHATIF_COLUMNS, whatif_table
from dashboards.tabs.whatif import WHATIF_DEFAULTS
from dashboards.whatif import (
    ScenarioError,
    expected_config,
    matching_run,
    predicted_tables,
    replay_index,
    scenario_from_controls,
    scenario_mismatch,
)
from overlapscope.config import Policy
from overlapscope.sim import Scenario, predict_from
from overlapscope.sim.events import replay_metrics
from overlapscope.sim.export import write_predicted_run

from .whatif_helpers import by_policy, error_text, number, scenario_controls, table_rows, texts

SELF_REPLAY_TOLERANCE = 0.05


@pytest.fixture(scope="module")
def registry(sample_runs: list[RunSource]) -> RunRegistry:
    """One registry for the module: each sample run is calibrated once."""
    return RunRegistry(sample_runs, use_disk_cache=False)


# --- scenario controls ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("controls", "expected"),
    [
        (scenario_controls("none"), Scenario(Policy.NONE)),
        (scenario_controls(fwd=["on"]), Scenario(Policy.BACKWARD_PRE, forward_prefetch=True)),
        (scenario_controls(limit=2), Scenario(Policy.BACKWARD_PRE, limit_all_gathers=2)),
        (scenario_controls(limit="3"), Scenario(Policy.BACKWARD_PRE, limit_all_gathers=3)),
        (scenario_controls(value=0.5), Scenario(Policy.BACKWARD_PRE, bandwidth_scale=0.5)),
        (scenario_controls(mode="gbit", value=2), Scenario(Policy.BACKWARD_PRE, link_gbit=2.0)),
        (WHATIF_DEFAULTS, Scenario(Policy.BACKWARD_PRE)),
    ],
    ids=["none", "fwd-prefetch", "limit", "limit-str", "scale", "gbit", "layout-defaults"],
)
def test_scenario_from_controls(controls: tuple[Any, ...], expected: Scenario) -> None:
    assert scenario_from_controls(*controls) == expected


@pytest.mark.parametrize(
    ("controls", "needle"),
    [
        (scenario_controls(value=0), "bandwidth scale must be a number > 0"),
        (scenario_controls(value=-1), "bandwidth scale must be a number > 0"),
        (scenario_controls(value=None), "bandwidth scale must be a number > 0"),
        (scenario_controls(mode="gbit", value=-0.5), "link rate must be a number of Gbit/s > 0"),
        (scenario_controls(mode="gbit", value="fast"), "link rate must be a number of Gbit/s > 0"),
        (scenario_controls(mode="gbit", value=float("nan")), "link rate"),
        (scenario_controls(limit=0), "rate limiter"),
        (scenario_controls(policy="sometimes"), "policy: 'sometimes' is not one of"),
        (scenario_controls(mode="carrier-pigeon"), "network: unknown mode"),
    ],
    ids=["scale-0", "scale-neg", "empty", "gbit-neg", "gbit-text", "gbit-nan", "limit-0",
         "policy", "mode"],
)  # fmt: skip
def test_bad_controls_are_one_line_errors(controls: tuple[Any, ...], needle: str) -> None:
    with pytest.raises(ScenarioError, match=needle) as err:
        scenario_from_controls(*controls)
    assert "\n" not in str(err.value)


# --- the measured run matching a scenario -----------------------------------------------------


def test_matching_run_finds_the_sweep_run_of_the_scenario(sample_runs: list[RunSource]) -> None:
    none = by_policy(sample_runs, "none")
    pre = by_policy(sample_runs, "backward_pre")
    limited = by_policy(sample_runs, "backward_pre", 2)
    post = by_policy(sample_runs, "backward_post")
    match = matching_run(sample_runs, none.key, Scenario(Policy.BACKWARD_PRE))
    assert match == pre.key
    assert matching_run(sample_runs, none.key, Scenario(Policy.BACKWARD_PRE, limit_all_gathers=2))
    assert matching_run(
        sample_runs, post.key, Scenario(Policy.BACKWARD_PRE, limit_all_gathers=2)
    ) == (limited.key)
    # Its own configuration: the source itself (no other repeat of it ships).
    assert matching_run(sample_runs, none.key, Scenario(Policy.NONE)) == none.key
    # Nothing was measured with forward prefetch or on another link.
    assert matching_run(sample_runs, none.key, Scenario(Policy.NONE, forward_prefetch=True)) is None
    assert matching_run(sample_runs, none.key, Scenario(Policy.NONE, bandwidth_scale=2)) is None
    assert matching_run(sample_runs, "no-such-run", Scenario(Policy.NONE)) is None


def test_expected_config_follows_the_network(sample_run_dir: Path) -> None:
    manifest = read_manifest(sample_run_dir)
    assert manifest is not None and manifest.config is not None
    cfg = manifest.config
    link = cfg.link_gbit
    assert link, "the sample runs were made on a shaped link"
    scaled = expected_config(cfg, Scenario(Policy.BACKWARD_POST, bandwidth_scale=0.5))
    assert scaled is not None and scaled.link_gbit is not None
    assert math.isclose(scaled.link_gbit, link * 0.5)
    assert scaled.engine.policy is Policy.BACKWARD_POST
    assert cfg.engine.policy is Policy.NONE  # the source's config is not modified
    shaped = expected_config(cfg, Scenario(Policy.NONE, link_gbit=3))
    assert shaped is not None and shaped.link_gbit == 3
    unshaped = dataclasses.replace(cfg, link_gbit=None)
    assert expected_config(unshaped, Scenario(Policy.NONE, bandwidth_scale=2)) is None
    assert expected_config(unshaped, Scenario(Policy.NONE)) == unshaped


def test_default_target_prefers_the_matching_run_then_run_b(
    registry: RunRegistry, sample_runs: list[RunSource]
) -> None:
    none = by_policy(sample_runs, "none")
    pre = by_policy(sample_runs, "backward_pre")
    post = by_policy(sample_runs, "backward_post")
    assert views.default_target(registry, none.key, post.key, *scenario_controls()) == pre.key
    fwd = scenario_controls(fwd=["on"])
    assert views.default_target(registry, none.key, post.key, *fwd) == post.key
    assert views.default_target(registry, none.key, none.key, *fwd) is None
    assert views.default_target(registry, none.key, "/etc", *fwd) is None
    # Invalid controls: no scenario to match, Run B.
    assert (
        views.default_target(registry, none.key, post.key, *scenario_controls(value=-1)) == post.key
    )


# --- prediction tables and figure ---------------------------------------------------------------


def test_self_replay_is_within_5_percent_of_the_measured_step(
    registry: RunRegistry, sample_runs: list[RunSource]
) -> None:
    for run in sample_runs:
        calib = registry.calibration(run.key)
        pred = predict_from(calib, calib.measured.scenario)
        rows = whatif_table(pred.table(calib.measured)).set_index("metric")
        assert list(rows.reset_index().columns) == list(WHATIF_COLUMNS)
        step = rows.loc["step time (ms)"]
        assert step["predicted"] > 0 and step["measured_source"] > 0
        assert step["measured_target"] == step["measured_source"]
        assert abs(step["error_pct"]) <= 100 * SELF_REPLAY_TOLERANCE, run.label
        # (an error against a measured 0 is undefined: a GPU run's NCCL wait where nothing
        # waited, a torch trace's peak memory where none was recorded)
        measured = rows["measured_target"] != 0
        assert np.isfinite(rows.loc[measured, "error_pct"]).all(), run.label


def test_whatif_table_converts_units_and_leaves_target_columns_empty_without_one(
    registry: RunRegistry, sample_runs: list[RunSource]
) -> None:
    calib = registry.calibration(by_policy(sample_runs, "none").key)
    pred = predict_from(calib, Scenario(Policy.BACKWARD_PRE))
    raw = pred.table().set_index("metric")
    rows = whatif_table(pred.table()).set_index("metric")
    assert rows.index.tolist() == [
        "step time (ms)",
        "exposed comm (ms/step)",
        "NCCL wait (ms/step)",
        "peak memory (MiB)",
    ]
    assert rows.loc["step time (ms)", "predicted"] == pytest.approx(
        raw.loc["step_time_us", "predicted"] / 1e3
    )
    assert rows.loc["peak memory (MiB)", "measured_source"] == pytest.approx(
        raw.loc["peak_mem_bytes", "measured_source"] / 2**20
    )
    assert rows[["measured_target", "error_pct"]].isna().all().all()
    change = rows.loc["step time (ms)"]
    assert change["change_pct"] == pytest.approx(
        100 * (change["predicted"] / change["measured_source"] - 1)
    )


def test_unknown_metric_keeps_its_name_and_unit() -> None:
    table = pd.DataFrame({"metric": ["joules"], "measured_source": [2.0], "predicted": [3.0]})
    row = whatif_table(table).iloc[0]
    assert (row["metric"], row["predicted"], row["change_pct"]) == ("joules", 3.0, 50.0)


def test_predicted_tables_hold_one_step_per_rank_in_the_analysis_schema(
    registry: RunRegistry, sample_runs: list[RunSource]
) -> None:
    calib = registry.calibration(by_policy(sample_runs, "none").key)
    pred = predict_from(calib, Scenario(Policy.BACKWARD_PRE))
    rep = pred.replays[0]
    timeline, exposed = predicted_tables(rep, 7)
    assert set(timeline["rank"]) == set(rep.step_time_us) == set(exposed["rank"])
    assert set(timeline["step"]) == {7}
    assert set(timeline["lane"]) == {"compute", "comm", "wait"}  # no issue ranges
    assert set(timeline["phase"]) <= set(palette.PHASE_STYLE)
    assert (timeline["dur_us"] >= 0).all() and (exposed["dur_us"] > 0).all()
    comm = timeline[timeline["lane"] == "comm"]
    assert (comm["bytes"] > 0).all() and (
        timeline.loc[timeline["lane"] != "comm", "bytes"] == 0
    ).all()
    # The exposed intervals add up to the replay's exposed communication, rank by rank.
    for m in replay_metrics([rep], len(rep.step_time_us)).itertuples():
        mine = exposed[exposed["rank"] == m.rank]
        assert mine["end_us"].max() <= rep.step_time_us[m.rank] + 1e-6
        assert mine["dur_us"].sum() == pytest.approx(m.exposed_comm_us, rel=1e-9, abs=1e-6)


def test_replay_index_follows_the_counted_steps() -> None:
    counted = {1: (3, 2), 0: (2, 3)}
    assert replay_index(counted, 3) == (1, 3)
    assert replay_index(counted, None) == (0, 2)
    assert replay_index(counted, 9) == (0, 2)


def test_whatif_figure_draws_predicted_above_measured_in_phase_colours(
    registry: RunRegistry, sample_runs: list[RunSource]
) -> None:
    src = by_policy(sample_runs, "none")
    calib = registry.calibration(src.key)
    pred = predict_from(calib, Scenario(Policy.BACKWARD_PRE))
    timeline, exposed = predicted_tables(pred.replays[0], 2)
    predicted = TimelinePanel("predicted", timeline, exposed, 0.0)
    measured = views._panel(registry.load(src.key), 2, prefix="measured · ")
    fig = whatif_figure(predicted, [measured])
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0] == "predicted" and titles[1].startswith("measured · ")
    colours = {t.legendgroup: t.marker.color for t in fig.data}
    for phase in ("fwd", "bwd", "ag_bwd", "rs"):
        assert colours[phase] == palette.phase_colour(phase)
    assert "exposed" in colours
    # Predicted bars are in the first panel, starting at the step start.
    first = [t for t in fig.data if t.yaxis == "y"]
    assert first and min(float(np.min(t.base)) for t in first) >= 0


# --- the view ----------------------------------------------------------------------------------


def test_view_shows_predicted_vs_measured_source_and_target(
    registry: RunRegistry, sample_runs: list[RunSource]
) -> None:
    none = by_policy(sample_runs, "none")
    pre = by_policy(sample_runs, "backward_pre")
    out = html.Div(views.whatif_view(registry, none.key, pre.key, None, *scenario_controls()))
    headers, rows = table_rows(out[ids.WHATIF_TABLE])
    assert headers[1:] == [
        f"measured: {none.label}",
        "predicted",
        "change vs source (%)",
        f"measured: {pre.label}",
        "prediction error (%)",
    ]
    assert rows[0][0] == "step time (ms)"
    for row in rows:
        values = [number(c) for c in row[1:]]
        assert all(math.isfinite(v) for v in values), row
    assert number(rows[0][2]) > 0  # predicted step time
    summary = " ".join(texts(out[ids.WHATIF_SUMMARY]))
    assert "backward_pre predicted from none" in summary
    titles = [a.text for a in out[ids.WHATIF_GRAPH].figure.layout.annotations]
    assert len(titles) == 3 and titles[0].startswith("predicted · backward_pre")
    assert pre.label in titles[1] and none.label in titles[2]
    assert not [c for c in out.children if getattr(c, "className", None) == ids.ERROR_PANEL_CLASS]


def test_view_without_target_hides_the_error_columns(
    registry: RunRegistry, sample_runs: list[RunSource]
) -> None:
    none = by_policy(sample_runs, "none")
    out = html.Div(views.whatif_view(registry, none.key, None, None, *scenario_controls(value=0.5)))
    headers, rows = table_rows(out[ids.WHATIF_TABLE])
    assert len(headers) == 4 and "prediction error (%)" not in headers
    assert len(rows) == 4
    assert any("Compare with" in t for t in texts(out))
    assert len(out[ids.WHATIF_GRAPH].figure.layout.annotations) == 2


def test_view_notes_a_target_of_another_configuration(
    registry: RunRegistry, sample_runs: list[RunSource]
) -> None:
    none = by_policy(sample_runs, "none")
    post = by_policy(sample_runs, "backward_post")
    out = views.whatif_view(registry, none.key, post.key, None, *scenario_controls())
    text = " ".join(texts(html.Div(out)))
    assert "was measured as backward_post, not backward_pre" in text
    calib = registry.calibration(none.key)
    slow = Scenario(Policy.NONE, bandwidth_scale=0.5)
    assert (
        scenario_mismatch(slow, calib.measured, calib.measured)
        == "ran on a 0.5 Gbit/s link, the scenario on a 0.25 Gbit/s link"
    )
    assert scenario_mismatch(Scenario(Policy.NONE), calib.measured, calib.measured) is None
    assert calib.manifest is not None and calib.manifest.config is not None
    cfg = calib.manifest.config
    smaller = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dim=192))
    said = scenario_mismatch(slow, calib.measured, calib.measured, cfg, smaller)
    assert said is not None and said.startswith("ran another workload (model.dim 192, not 384)")
    assert said.endswith("the scenario on a 0.25 Gbit/s link")  # every reason, not the first


@pytest.mark.parametrize(
    ("controls", "needle"),
    [
        (scenario_controls(value=-1), "Cannot predict: network: the bandwidth scale must be"),
        (scenario_controls(mode="gbit", value=0), "Cannot predict: network: the link rate"),
    ],
    ids=["scale", "gbit"],
)
def test_view_refuses_a_non_positive_network_in_one_line(
    registry: RunRegistry, sample_runs: list[RunSource], controls: Any, needle: str
) -> None:
    out = views.whatif_view(registry, sample_runs[0].key, None, None, *controls)
    assert needle in error_text(out)


def test_view_refuses_unknown_and_missing_runs(registry: RunRegistry) -> None:
    assert "unknown run" in error_text(
        views.whatif_view(registry, "../none", None, None, *scenario_controls())
    )
    assert "pick the measured run" in error_text(views.whatif_view(registry, None, None, None))


def test_runs_that_cannot_be_calibrated_say_why(
    registry: RunRegistry, sample_runs: list[RunSource], sample_run_dir: Path, tmp_path: Path
) -> None:
    # A bare profiler trace (no overlapscope run.json), and a what-if prediction.
    bare = tmp_path / "bare"
    bare.mkdir()
    for trace in sample_run_dir.glob("rank-*.json.gz"):
        shutil.copy(trace, bare)
    calib = registry.calibration(by_policy(sample_runs, "none").key)
    write_predicted_run(predict_from(calib, Scenario(Policy.BACKWARD_PRE)), tmp_path / "pred")
    runs = discover_runs([bare, tmp_path / "pred"])
    local = RunRegistry([*sample_runs, *runs], use_disk_cache=False)
    for key, needle in [
        ("bare", "neither an overlapscope run (no run.json) nor a torch FSDP trace"),
        ("pred", "pred is a what-if prediction (from none), not a measurement"),
    ]:
        with pytest.raises(CalibrationError, match=re.escape(needle)):
            local.calibration(key)
        assert needle.split(";")[0] in error_text(
            views.whatif_view(local, key, None, None, *scenario_controls())
        )
    # As the target: the prediction is still shown, the comparison says why not.
    out = views.whatif_view(
        local, by_policy(sample_runs, "none").key, "pred", None, *scenario_controls()
    )
    assert "Cannot compare: pred is a what-if prediction" in error_text(out)
    assert ids.WHATIF_TABLE in str(out)
