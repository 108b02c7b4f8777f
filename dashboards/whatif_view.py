"""The what-if tab: Run A's prediction under a scenario, compared with a measured run.

A plain typed function of (registry, run keys, step, scenario controls) -> Dash components,
like every view in :mod:`dashboards.views` (which re-exports these names); every failure is a
one-line error panel, never an exception.
"""

from __future__ import annotations

import pandas as pd
from dash import dcc, html
from dash.development.base_component import Component

from dashboards import ids
from dashboards.components import GRAPH_CONFIG, error_panel, html_table, run_panel
from dashboards.data import LoadedRun, RunRegistry
from dashboards.figures import TimelinePanel, whatif_figure
from dashboards.tables import whatif_table
from dashboards.whatif import (
    ScenarioError,
    matching_run,
    predicted_tables,
    replay_index,
    scenario_from_controls,
    scenario_mismatch,
)
from overlapscope.config import RunConfig
from overlapscope.errors import UserError
from overlapscope.manifest import RunManifest
from overlapscope.sim import Calibration, Measured, Prediction, Scenario, predict_from

PREDICT_ERROR = "Cannot predict: "
COMPARE_ERROR = "Cannot compare: "
WHATIF_HEADERS: dict[str, str] = {
    "metric": "metric (per step, mean over ranks; memory: max)",
    "measured_source": "measured: {source}",
    "predicted": "predicted",
    "change_pct": "change vs source (%)",
    "measured_target": "measured: {target}",
    "error_pct": "prediction error (%)",
}
TARGET_COLUMNS = ("measured_target", "error_pct")
NOTE_STYLE = {"color": "#555", "fontSize": "13px", "margin": "4px 0"}


def default_target(
    registry: RunRegistry, run_a: str | None, run_b: str | None, *controls: object
) -> str | None:
    """The run to compare the prediction with: a measured run whose run.json config is
    Run A's under the controls' scenario, else Run B (when it is not Run A), else none."""
    keys = {s.key for s in registry.sources}
    try:
        scenario = scenario_from_controls(*controls)
    except ScenarioError:
        scenario = None
    if scenario is not None and isinstance(run_a, str) and run_a in keys:
        found = matching_run(registry.sources, run_a, scenario)
        if found is not None:
            return found
    return run_b if isinstance(run_b, str) and run_b in keys and run_b != run_a else None


def whatif_html(rows: pd.DataFrame, source: str, target: str | None) -> html.Table:
    columns = [c for c in rows.columns if target is not None or c not in TARGET_COLUMNS]
    names = {c: WHATIF_HEADERS[c].format(source=source, target=target) for c in columns}
    return html_table(rows, columns, names, ids.WHATIF_TABLE)


def _summary(pred: Prediction, source: str) -> str:
    m = pred.calibration.measured
    link = f" on a {m.link_gbit:g} Gbit/s link" if m.link_gbit else ""
    return (
        f"{pred.scenario.label} predicted from {source} (measured as {m.scenario.label}{link}), "
        f"mean of {len(pred.replays)} replayed step(s). Full-parameter units alive in "
        f"backward: {pred.max_alive_in_backward} (measured {m.max_alive_in_backward}); "
        f"prefetches deferred by the rate limiter: {pred.deferred_prefetches}."
    )


def _run_config(m: RunManifest | None) -> RunConfig | None:
    return m.config if m else None


def _target(registry: RunRegistry, target: str) -> tuple[LoadedRun, Measured]:
    return registry.load(target), registry.calibration(target).measured


def whatif_view(
    registry: RunRegistry,
    run_a: str | None,
    target: str | None,
    step: int | None,
    *controls: object,
) -> list[Component]:
    """Run A's prediction under the scenario of ``controls`` (policy, forward prefetch,
    limiter, network mode, network value; see ``whatif.scenario_from_controls``): a summary
    line, predicted vs measured table (with the ``target`` run's measurement and the error
    when one is picked) and the predicted step's timeline above the measured one(s). Every
    failure is a one-line error panel."""
    if run_a is None:
        return [error_panel("pick the measured run to predict from as Run A", PREDICT_ERROR)]
    try:
        scenario: Scenario = scenario_from_controls(*controls)
        calib = registry.calibration(run_a)  # first: it refuses a bare trace before loading it
        source = registry.load(run_a)
    except UserError as e:
        return [error_panel(str(e), PREDICT_ERROR)]
    try:
        pred = predict_from(calib, scenario)
    except UserError as e:  # a scenario the model refuses for this run (a GPU run's limits)
        return [error_panel(str(e), PREDICT_ERROR)]
    except Exception as e:  # the simulator's failure must not take the panel down
        return [error_panel(f"the simulator failed: {type(e).__name__}: {e}", PREDICT_ERROR)]

    notes, target_run, measured_target = _comparison(registry, target, scenario, calib)
    rows = whatif_table(pred.table(measured_target))
    table = whatif_html(
        rows, source.source.label, target_run.source.label if target_run is not None else None
    )
    graph = _whatif_graph(pred, scenario, source, target_run, step)
    return [
        html.P(_summary(pred, source.source.label), id=ids.WHATIF_SUMMARY),
        table,
        *notes,
        graph,
    ]


def _comparison(
    registry: RunRegistry, target: str | None, scenario: Scenario, calib: Calibration
) -> tuple[list[Component], LoadedRun | None, Measured | None]:
    """Notes on the compared run (a hint when none is picked, its load error, or how its
    configuration differs from the scenario), the run and its measurement when it loads."""
    notes: list[Component] = []
    measured_target: Measured | None = None
    target_run: LoadedRun | None = None
    if target is None:
        notes.append(
            html.P(
                "Pick a measured run of this scenario under 'Compare with' to see the "
                "prediction's error.",
                style=NOTE_STYLE,
            )
        )
    else:
        try:
            target_run, measured_target = _target(registry, target)
        except UserError as e:
            notes.append(error_panel(str(e), COMPARE_ERROR))
        else:
            mismatch = scenario_mismatch(
                scenario,
                calib.measured,
                measured_target,
                _run_config(calib.manifest),
                _run_config(target_run.manifest),
            )
            if mismatch:
                notes.append(
                    html.P(f"Note: {target_run.source.label} {mismatch}.", style=NOTE_STYLE)
                )
    return notes, target_run, measured_target


def _whatif_graph(
    pred: Prediction,
    scenario: Scenario,
    source: LoadedRun,
    target_run: LoadedRun | None,
    step: int | None,
) -> Component:
    """The predicted step's timeline above the measured one(s) of the replayed step."""
    try:
        i, replayed = replay_index(source.analysis.counted_steps, step)
        timeline, exposed = predicted_tables(pred.replays[min(i, len(pred.replays) - 1)], replayed)
        predicted = TimelinePanel(
            title=f"predicted · {scenario.label} from {source.source.label} · "
            f"replay of step {replayed}",
            timeline=timeline,
            exposed=exposed,
            origin_us=0.0,
        )
        measured = [run_panel(source, replayed, prefix="measured · ")]
        if target_run is not None and target_run.source.key != source.source.key:
            measured.insert(0, run_panel(target_run, replayed, prefix="measured · "))
    except UserError as e:
        return error_panel(str(e), PREDICT_ERROR)
    else:
        return dcc.Graph(
            id=ids.WHATIF_GRAPH, figure=whatif_figure(predicted, measured), config=GRAPH_CONFIG
        )
