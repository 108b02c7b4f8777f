"""Each view as a plain typed function of (registry, run keys, step) -> Dash components.

Callbacks only forward their inputs here; tests call these directly. A run that is unknown,
gone or unreadable becomes an error panel (``error_panel``), never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from dash import dcc, html
from dash.development.base_component import Component

from dashboards import ids
from dashboards.critical_path import ClockMode, add_paths, clock_mode, panel_path, raw_tables
from dashboards.data import LoadedRun, RunRegistry, RunSource
from dashboards.figures import (
    TimelinePanel,
    step_panel,
    timeline_figure,
    whatif_figure,
)
from dashboards.run_figures import ranks_figure, tradeoff_figure, units_figure
from dashboards.tables import (
    OVERVIEW_COLUMNS,
    OVERVIEW_HEADERS,
    findings_table,
    overview_table,
    straggler_summary,
    tradeoff_table,
    whatif_table,
)
from dashboards.whatif import (
    ScenarioError,
    matching_run,
    predicted_tables,
    replay_index,
    scenario_from_controls,
    scenario_mismatch,
)
from overlapscope.errors import UserError
from overlapscope.sim import Measured, Prediction, Scenario, predict_from

ERROR_STYLE = {
    "border": "1px solid #d62728",
    "background": "#fdecea",
    "color": "#611a15",
    "padding": "10px 14px",
    "borderRadius": "6px",
    "margin": "8px 0",
}
GRAPH_CONFIG: dcc.Graph.Config = {"displaylogo": False, "scrollZoom": True}


def error_panel(message: str, title: str = "Cannot show this run: ") -> html.Div:
    return html.Div(
        [html.Strong(title), html.Span(message)],
        className=ids.ERROR_PANEL_CLASS,
        style=ERROR_STYLE,
    )


def _load_many(
    registry: RunRegistry, keys: Sequence[str | None]
) -> tuple[list[LoadedRun], list[Component]]:
    runs: list[LoadedRun] = []
    errors: list[Component] = []
    for key in keys:
        if key is None:
            continue
        try:
            runs.append(registry.load(key))
        except UserError as e:
            errors.append(error_panel(str(e)))
    return runs, errors


def _selected(run_a: str | None, run_b: str | None) -> list[str | None]:
    return [run_a] if run_b in (None, run_a) else [run_a, run_b]


def run_options(registry: RunRegistry) -> list[dict[str, str]]:
    return [{"label": picker_label(s), "value": s.key} for s in registry.sources]


def step_options(registry: RunRegistry, run_a: str | None, run_b: str | None) -> list[int]:
    """Counted steps of the chosen runs (a run that fails to load contributes none)."""
    runs, _ = _load_many(registry, _selected(run_a, run_b))
    steps = {int(s) for r in runs for s in r.analysis.steps["step"].unique()}
    return sorted(steps)


NUMBER_FORMATS: dict[str, str] = {
    "step_ms": "{:.1f}",
    "throughput_tok_s": "{:,.0f}",
    "exposed_comm_per_step_ms": "{:.1f}",
    "nccl_wait_per_step_ms": "{:.1f}",
    "overlap_pct": "{:.1f}",
    "peak_mem_mib": "{:.1f}",
    "busbw_gbit_s": "{:.3f}",
    "measured_source": "{:,.1f}",
    "predicted": "{:,.1f}",
    "measured_target": "{:,.1f}",
    "change_pct": "{:+.1f}",
    "error_pct": "{:+.1f}",
}
CELL_STYLE = {"padding": "4px 10px", "borderBottom": "1px solid #e5e5e5", "textAlign": "right"}
HEAD_STYLE = CELL_STYLE | {"background": "#f3f3f3", "fontWeight": "bold", "verticalAlign": "bottom"}

TEXT_ALIGN: dict[str, dict[str, str]] = {
    "run": {"textAlign": "left"},
    "policy": {"textAlign": "left"},
    "metric": {"textAlign": "left"},
}


def format_cell(column: str, value: object) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    fmt = NUMBER_FORMATS.get(column)
    return fmt.format(value) if fmt and isinstance(value, int | float) else str(value)


def html_table(
    rows: pd.DataFrame, columns: Sequence[str], headers: Mapping[str, str], table_id: str
) -> html.Table:
    """A plain table of ``rows[columns]``, headed by ``headers``, cells by ``format_cell``."""
    head = html.Tr([html.Th(headers[c], style=HEAD_STYLE | TEXT_ALIGN.get(c, {})) for c in columns])
    body = [
        html.Tr(
            [
                html.Td(format_cell(c, row[c]), style=CELL_STYLE | TEXT_ALIGN.get(c, {}))
                for c in columns
            ]
        )
        for row in rows.to_dict("records")
    ]
    return html.Table(
        [html.Thead(head), html.Tbody(body)],
        id=table_id,
        style={"borderCollapse": "collapse", "fontSize": "14px", "width": "100%"},
    )


def overview_html(table: pd.DataFrame) -> html.Table:
    return html_table(table, OVERVIEW_COLUMNS, OVERVIEW_HEADERS, ids.OVERVIEW_TABLE)


def overview_view(registry: RunRegistry) -> list[Component]:
    runs, errors = _load_many(registry, [s.key for s in registry.sources])
    return [
        html.H3("Runs and ranks (per-step means over the profiled steps)"),
        *errors,
        overview_html(overview_table(runs)),
        html.H3("Findings (largest time at stake first)"),
        html.Div(_findings(findings_table(runs)), id=ids.FINDINGS),
    ]


def _findings(findings: pd.DataFrame) -> list[Component]:
    if findings.empty:
        return [html.P("No findings: nothing above 1% of the step time.")]
    cards: list[Component] = []
    for run, rows in findings.groupby("run", sort=False):
        items = [
            html.Li(
                [
                    html.Strong(
                        f"{r.title}"
                        + (
                            f" (rank {int(r.rank)})"
                            if pd.notna(r.rank) and f"rank {int(r.rank)}" not in r.title
                            else ""
                        )
                        + f": {r.stake_ms:.1f} ms/step at stake"
                    ),
                    html.Div(f"evidence: {r.evidence}"),
                    html.Div(f"try: {r.change}", style={"color": "#1f5f1f"}),
                ],
                className="finding",
                style={"marginBottom": "6px"},
            )
            for r in rows.itertuples(index=False)
        ]
        cards.append(html.Div([html.H4(str(run)), html.Ol(items)]))
    return cards


def _panel(
    run: LoadedRun, step: int | None, prefix: str = "", mode: ClockMode = ClockMode.ALIGNED
) -> TimelinePanel:
    a = run.analysis
    available = sorted(int(s) for s in a.steps["step"].unique())
    if not available:
        raise UserError(f"{run.source.label}: no profiled steps")
    chosen = step if step in available else available[0]
    note = "" if chosen == step or step is None else f" (step {step} not profiled)"
    title = f"{prefix}{run.source.label} · policy {run.source.policy or '?'} · step {chosen}{note}"
    timeline, exposed = raw_tables(a) if mode is ClockMode.RAW else (a.timeline, a.exposed)
    title += " · raw clocks" if mode is ClockMode.RAW else ""
    return step_panel(title, timeline, exposed, a.steps, chosen)


def timeline_view(
    registry: RunRegistry,
    run_a: str | None,
    run_b: str | None,
    step: int | None,
    window_ms: tuple[float, float] | None = None,
    clocks: str | None = None,
) -> list[Component]:
    mode = clock_mode(clocks)
    runs, errors = _load_many(registry, _selected(run_a, run_b))
    panels: list[TimelinePanel] = []
    paths = []
    for run in runs:
        try:
            panels.append(_panel(run, step, mode=mode))
        except UserError as e:
            errors.append(error_panel(str(e)))
            continue
        p = panels[-1]
        paths.append((len(panels), panel_path(run.analysis, p.timeline, mode), p.origin_us))
    if not panels:
        return errors or [error_panel("no run selected")]
    fig = add_paths(timeline_figure(panels, window_ms=window_ms), paths)
    return [*errors, dcc.Graph(id=ids.TIMELINE_GRAPH, figure=fig, config=GRAPH_CONFIG)]


def units_view(registry: RunRegistry, run_a: str | None, run_b: str | None) -> list[Component]:
    runs, errors = _load_many(registry, _selected(run_a, run_b))
    if not runs:
        return errors or [error_panel("no run selected")]
    fig = units_figure([(r.source.label, r.analysis.units) for r in runs])
    return [*errors, dcc.Graph(id=ids.UNITS_GRAPH, figure=fig, config=GRAPH_CONFIG)]


def tradeoff_view(registry: RunRegistry) -> list[Component]:
    runs, errors = _load_many(registry, [s.key for s in registry.sources])
    fig = tradeoff_figure(tradeoff_table(overview_table(runs)))
    return [*errors, dcc.Graph(id=ids.TRADEOFF_GRAPH, figure=fig, config=GRAPH_CONFIG)]


def ranks_view(registry: RunRegistry, run_a: str | None) -> list[Component]:
    runs, errors = _load_many(registry, [run_a])
    if not runs:
        return errors or [error_panel("no run selected")]
    run = runs[0]
    a = run.analysis
    fig = ranks_figure(a.collectives, a.collective_ranks)
    fig.update_layout(title_text=f"Ranks: waiting for peers vs transfer · {run.source.label}")
    lines = straggler_summary(a.collectives)
    return [
        dcc.Graph(id=ids.RANKS_GRAPH, figure=fig, config=GRAPH_CONFIG),
        html.Div(
            [html.H4("Stragglers"), html.Ul([html.Li(t) for t in lines] or [html.Li("none")])],
            id=ids.STRAGGLERS,
        ),
    ]


def render_view(
    registry: RunRegistry,
    tab: str,
    run_a: str | None,
    run_b: str | None,
    step: int | None,
    window_ms: tuple[float, float] | None = None,
    clocks: str | None = None,
) -> list[Component]:
    """The chosen tab's content; unknown tabs and run keys become an error panel."""
    try:
        for key in (run_a, run_b):
            if key is not None:
                registry.source(key)
        match tab:
            case ids.TAB_OVERVIEW:
                return overview_view(registry)
            case ids.TAB_TIMELINE:
                return timeline_view(registry, run_a, run_b, step, window_ms, clocks)
            case ids.TAB_UNITS:
                return units_view(registry, run_a, run_b)
            case ids.TAB_TRADEOFF:
                return tradeoff_view(registry)
            case ids.TAB_RANKS:
                return ranks_view(registry, run_a)
            case ids.TAB_WHATIF:
                return []  # the what-if panel is its own container (``whatif_view``)
            case _:
                return [error_panel(f"unknown view {str(tab)[:40]!r}")]
    except UserError as e:
        return [error_panel(str(e))]


# --- what-if --------------------------------------------------------------------------------

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


def picker_label(s: RunSource) -> str:
    """The run's name, and its configuration where the name does not say it."""
    config = s.config or "traces"
    return s.label if s.label == config else f"{s.label} ({config})"


def _run_config(meta: dict[str, Any] | None) -> dict[str, Any] | None:
    cfg = (meta or {}).get("config")
    return cfg if isinstance(cfg, dict) else None


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
    except Exception as e:  # the simulator's failure must not take the panel down
        return [error_panel(f"the simulator failed: {type(e).__name__}: {e}", PREDICT_ERROR)]

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
                _run_config(calib.run_meta),
                _run_config(target_run.run_meta),
            )
            if mismatch:
                notes.append(
                    html.P(f"Note: {target_run.source.label} {mismatch}.", style=NOTE_STYLE)
                )

    rows = whatif_table(pred.table(measured_target))
    table = whatif_html(
        rows, source.source.label, target_run.source.label if target_run is not None else None
    )
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
        measured = [_panel(source, replayed, prefix="measured · ")]
        if target_run is not None and target_run.source.key != source.source.key:
            measured.insert(0, _panel(target_run, replayed, prefix="measured · "))
    except UserError as e:
        graph: Component = error_panel(str(e), PREDICT_ERROR)
    else:
        graph = dcc.Graph(
            id=ids.WHATIF_GRAPH, figure=whatif_figure(predicted, measured), config=GRAPH_CONFIG
        )
    return [
        html.P(_summary(pred, source.source.label), id=ids.WHATIF_SUMMARY),
        table,
        *notes,
        graph,
    ]
