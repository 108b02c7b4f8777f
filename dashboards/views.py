"""Each view as a plain typed function of (registry, run keys, step) -> Dash components.

Callbacks only forward their inputs here; tests call these directly. A run that is unknown,
gone or unreadable becomes an error panel (``error_panel``), never an exception.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from dash import dcc, html
from dash.development.base_component import Component

from dashboards import ids
from dashboards.data import LoadedRun, RunRegistry
from dashboards.figures import (
    TimelinePanel,
    ranks_figure,
    step_panel,
    timeline_figure,
    tradeoff_figure,
    units_figure,
)
from dashboards.tables import (
    OVERVIEW_COLUMNS,
    OVERVIEW_HEADERS,
    findings_table,
    overview_table,
    straggler_summary,
    tradeoff_table,
)
from overlapscope.errors import UserError

ERROR_STYLE = {
    "border": "1px solid #d62728",
    "background": "#fdecea",
    "color": "#611a15",
    "padding": "10px 14px",
    "borderRadius": "6px",
    "margin": "8px 0",
}
GRAPH_CONFIG: dcc.Graph.Config = {"displaylogo": False, "scrollZoom": True}


def error_panel(message: str) -> html.Div:
    return html.Div(
        [html.Strong("Cannot show this run: "), html.Span(message)],
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
    return [
        {"label": f"{s.label} ({s.policy or 'traces'})", "value": s.key} for s in registry.sources
    ]


def step_options(registry: RunRegistry, run_a: str | None, run_b: str | None) -> list[int]:
    """Counted steps of the chosen runs (a run that fails to load contributes none)."""
    runs, _ = _load_many(registry, _selected(run_a, run_b))
    steps = {int(s) for r in runs for s in r.analysis.steps["step"].unique()}
    return sorted(steps)


NUMBER_FORMATS: dict[str, str] = {
    "step_ms": "{:.1f}",
    "throughput_tok_s": "{:,.0f}",
    "exposed_comm_ms": "{:.1f}",
    "nccl_wait_ms": "{:.1f}",
    "overlap_pct": "{:.1f}",
    "peak_mem_mib": "{:.1f}",
    "busbw_gbps": "{:.3f}",
}
CELL_STYLE = {"padding": "4px 10px", "borderBottom": "1px solid #e5e5e5", "textAlign": "right"}
HEAD_STYLE = CELL_STYLE | {"background": "#f3f3f3", "fontWeight": "bold", "verticalAlign": "bottom"}

TEXT_ALIGN: dict[str, dict[str, str]] = {
    "run": {"textAlign": "left"},
    "policy": {"textAlign": "left"},
}


def format_cell(column: str, value: object) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    fmt = NUMBER_FORMATS.get(column)
    return fmt.format(value) if fmt and isinstance(value, int | float) else str(value)


def overview_html(table: pd.DataFrame) -> html.Table:
    head = html.Tr(
        [
            html.Th(OVERVIEW_HEADERS[c], style=HEAD_STYLE | TEXT_ALIGN.get(c, {}))
            for c in OVERVIEW_COLUMNS
        ]
    )
    body = [
        html.Tr(
            [
                html.Td(format_cell(c, row[c]), style=CELL_STYLE | TEXT_ALIGN.get(c, {}))
                for c in OVERVIEW_COLUMNS
            ]
        )
        for row in table.to_dict("records")
    ]
    return html.Table(
        [html.Thead(head), html.Tbody(body)],
        id=ids.OVERVIEW_TABLE,
        style={"borderCollapse": "collapse", "fontSize": "14px", "width": "100%"},
    )


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
                        + (f" (rank {int(r.rank)})" if pd.notna(r.rank) else "")
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


def _panel(run: LoadedRun, step: int | None) -> TimelinePanel:
    a = run.analysis
    available = sorted(int(s) for s in a.steps["step"].unique())
    if not available:
        raise UserError(f"{run.source.label}: no profiled steps")
    chosen = step if step in available else available[0]
    note = "" if chosen == step or step is None else f" (step {step} not profiled)"
    title = f"{run.source.label} · policy {run.source.policy or '?'} · step {chosen}{note}"
    return step_panel(title, a.timeline, a.exposed, a.steps, chosen)


def timeline_view(
    registry: RunRegistry,
    run_a: str | None,
    run_b: str | None,
    step: int | None,
    window_ms: tuple[float, float] | None = None,
) -> list[Component]:
    runs, errors = _load_many(registry, _selected(run_a, run_b))
    panels: list[TimelinePanel] = []
    for run in runs:
        try:
            panels.append(_panel(run, step))
        except UserError as e:
            errors.append(error_panel(str(e)))
    if not panels:
        return errors or [error_panel("no run selected")]
    fig = timeline_figure(panels, window_ms=window_ms)
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
                return timeline_view(registry, run_a, run_b, step, window_ms)
            case ids.TAB_UNITS:
                return units_view(registry, run_a, run_b)
            case ids.TAB_TRADEOFF:
                return tradeoff_view(registry)
            case ids.TAB_RANKS:
                return ranks_view(registry, run_a)
            case _:
                return [error_panel(f"unknown view {str(tab)[:40]!r}")]
    except UserError as e:
        return [error_panel(str(e))]
