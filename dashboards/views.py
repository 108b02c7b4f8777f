"""Each view as a plain typed function of (registry, run keys, step) -> Dash components.

Callbacks only forward their inputs here; tests call these directly. A run that is unknown,
gone or unreadable becomes an error panel (``error_panel``), never an exception.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pandas as pd
from dash import dcc, html
from dash.development.base_component import Component

from dashboards import ids
from dashboards.big_run import (
    PICKER_HIDDEN,
    PICKER_SHOWN,
    chosen_step,
    rank_options,
    step_view,
)
from dashboards.components import (
    GRAPH_CONFIG,
    error_panel,
    html_table,
    run_panel,
    warning_panel,
)
from dashboards.critical_path import add_paths, clock_mode, panel_path
from dashboards.data import LoadedRun, RunRegistry, RunSource
from dashboards.figures import (
    TimelinePanel,
    timeline_figure,
)
from dashboards.flight_panel import flight_panel
from dashboards.groups import EVERY, group_picker, of_group
from dashboards.run_figures import ranks_figure, tradeoff_figure, units_figure, waits_figure
from dashboards.tables import (
    OVERVIEW_COLUMNS,
    OVERVIEW_HEADERS,
    findings_table,
    overview_table,
    straggler_summary,
    tradeoff_table,
)
from dashboards.wait_tables import (
    HOST_OP_COLUMNS,
    HOST_OP_HEADERS,
    UNIT_SPLIT_COLUMNS,
    UNIT_SPLIT_HEADERS,
    host_ops_table,
    unit_split_table,
)
from dashboards.whatif_view import default_target, whatif_html, whatif_view
from overlapscope.analysis.findings.registry import no_findings_sentence
from overlapscope.errors import UserError

# Re-exported: callbacks and tests call these as ``views.*`` (the what-if tab lives in
# dashboards/whatif_view.py, the shared building blocks in dashboards/components.py).
_panel = run_panel
__all__ = [
    "default_target",
    "error_panel",
    "html_table",
    "picker_label",
    "render_view",
    "run_options",
    "step_options",
    "timeline_view",
    "whatif_html",
    "whatif_view",
]


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


def overview_html(table: pd.DataFrame) -> html.Table:
    return html_table(table, OVERVIEW_COLUMNS, OVERVIEW_HEADERS, ids.OVERVIEW_TABLE)


def overview_view(registry: RunRegistry) -> list[Component]:
    runs, errors = _load_many(registry, [s.key for s in registry.sources])
    warned = [
        warning_panel(r.source.label, r.analysis.warnings) for r in runs if r.analysis.warnings
    ]
    return [
        html.H3("Runs and ranks (per-step means over the profiled steps)"),
        *errors,
        *warned,
        overview_html(overview_table(runs)),
        html.H3("Findings (largest time at stake first)"),
        html.Div(_findings(findings_table(runs)), id=ids.FINDINGS),
    ]


def _findings(findings: pd.DataFrame) -> list[Component]:
    if findings.empty:
        return [html.P(no_findings_sentence().capitalize() + ".")]
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
                    *([html.Div(r.where)] if r.where else []),
                    html.Div(f"evidence: {r.evidence}"),
                    *(html.Div(f"· {item}", style={"marginLeft": "12px"}) for item in r.items),
                    *(html.Div(f"try: {lv}", style={"color": "#1f5f1f"}) for lv in r.levers),
                ],
                className="finding",
                style={"marginBottom": "6px"},
            )
            for r in rows.itertuples(index=False)
        ]
        cards.append(html.Div([html.H4(str(run)), html.Ol(items)]))
    return cards


def timeline_view(
    registry: RunRegistry,
    run_a: str | None,
    run_b: str | None,
    step: int | None,
    window_ms: tuple[float, float] | None = None,
    clocks: str | None = None,
    ranks: object = None,
) -> list[Component]:
    """The step's timeline of each chosen run; of a run opened with ``--dask``, the rows of
    ``ranks`` only (the ranks picker's value; empty: the default), read on demand."""
    mode = clock_mode(clocks)
    runs, errors = _load_many(registry, _selected(run_a, run_b))
    panels: list[TimelinePanel] = []
    paths = []
    notes: list[Component] = []
    for run in runs:
        try:
            run, suffix = _ranks_shown(run, step, ranks, notes)
            panels.append(run_panel(run, step, mode=mode))
        except UserError as e:
            errors.append(error_panel(str(e)))
            continue
        p = panels[-1] = dataclasses.replace(panels[-1], title=panels[-1].title + suffix)
        paths.append((len(panels), panel_path(run.analysis, p.timeline, mode), p.origin_us))
    if not panels:
        return errors or [error_panel("no run selected")]
    fig = add_paths(timeline_figure(panels, window_ms=window_ms), paths)
    graph = dcc.Graph(id=ids.TIMELINE_GRAPH, figure=fig, config=GRAPH_CONFIG)
    shown = [html.Div(notes, id=ids.RANKS_NOTE)] if notes else []  # runs opened with --dask
    return [*errors, *shown, graph]


def _ranks_shown(
    run: LoadedRun, step: int | None, ranks: object, notes: list[Component]
) -> tuple[LoadedRun, str]:
    """A run opened with ``--dask`` as its panel draws it (the step's rows of the chosen
    ranks), the panel title's rank suffix, and its note in ``notes``; others unchanged."""
    if run.timelines is None:
        return run, ""
    view, choice = step_view(run, step, ranks)
    note = choice.note(run.source.label, chosen_step(run.analysis, step))
    notes.append(html.P(note))
    return view, choice.title()


def rank_picker(
    registry: RunRegistry, run_a: str | None, run_b: str | None
) -> tuple[list[dict[str, object]], dict[str, str]]:
    """The ranks picker's options and style: shown for runs opened with ``--dask`` only."""
    if registry.dask is None:
        return [], PICKER_HIDDEN
    runs, _ = _load_many(registry, _selected(run_a, run_b))
    big = [r for r in runs if r.timelines is not None]
    return (rank_options(big), PICKER_SHOWN) if big else ([], PICKER_HIDDEN)


def units_view(registry: RunRegistry, run_a: str | None, run_b: str | None) -> list[Component]:
    runs, errors = _load_many(registry, _selected(run_a, run_b))
    if not runs:
        return errors or [error_panel("no run selected")]
    fig = units_figure([(r.source.label, r.analysis.units) for r in runs])
    split = [
        html.Div(
            [
                html.H4(f"Exposed time by cause · {r.source.label} (ms per step, mean over ranks)"),
                html_table(
                    unit_split_table(r.analysis.units),
                    UNIT_SPLIT_COLUMNS,
                    UNIT_SPLIT_HEADERS,
                    f"{ids.UNITS_SPLIT}-{i}",
                ),
            ]
        )
        for i, r in enumerate(runs)
    ]
    graph = dcc.Graph(id=ids.UNITS_GRAPH, figure=fig, config=GRAPH_CONFIG)
    return [*errors, graph, html.Div(split, id=ids.UNITS_SPLIT)]


def tradeoff_view(registry: RunRegistry) -> list[Component]:
    runs, errors = _load_many(registry, [s.key for s in registry.sources])
    fig = tradeoff_figure(tradeoff_table(overview_table(runs)))
    return [*errors, dcc.Graph(id=ids.TRADEOFF_GRAPH, figure=fig, config=GRAPH_CONFIG)]


def ranks_group_figure(registry: RunRegistry, run_a: str | None, group: str | None) -> Any:
    """The ranks' heat map of the collectives of ``group`` (None: every group)."""
    runs, _ = _load_many(registry, [run_a])
    if not runs:
        return ranks_figure(pd.DataFrame(), pd.DataFrame())
    a = runs[0].analysis
    fig = ranks_figure(*of_group(a.collectives, a.collective_ranks, group))
    shown = "" if group in (None, EVERY) else f" · {group}"
    fig.update_layout(
        title_text=f"Ranks: waiting for peers vs transfer · {runs[0].source.label}{shown}"
    )
    return fig


def ranks_view(registry: RunRegistry, run_a: str | None) -> list[Component]:
    runs, errors = _load_many(registry, [run_a])
    if not runs:
        return errors or [error_panel("no run selected")]
    run = runs[0]
    a = run.analysis
    fig = ranks_group_figure(registry, run_a, None)
    picker = group_picker(a.collectives)
    lines = straggler_summary(a.collectives)
    waits = waits_figure(a.ranks)
    steps = float(a.ranks["num_steps"].mean()) if len(a.ranks) else 1.0
    host = host_ops_table(a.host_ops, len(a.ranks), steps)
    return [
        dcc.Graph(id=ids.WAITS_GRAPH, figure=waits, config=GRAPH_CONFIG),
        html.Div(
            [
                html.H4("While the GPU waited for its host, the launching thread was in"),
                html_table(host, HOST_OP_COLUMNS, HOST_OP_HEADERS, f"{ids.HOST_OPS}-table")
                if len(host)
                else html.P("no GPU idle caused by the host"),
            ],
            id=ids.HOST_OPS,
        ),
        *([picker] if picker is not None else []),
        dcc.Graph(id=ids.RANKS_GRAPH, figure=fig, config=GRAPH_CONFIG),
        html.Div(
            [html.H4("Stragglers"), html.Ul([html.Li(t) for t in lines] or [html.Li("none")])],
            id=ids.STRAGGLERS,
        ),
        *flight_panel(run.source.path, a.collectives),  # where the run carries dumps
    ]


def render_view(
    registry: RunRegistry,
    tab: str,
    run_a: str | None,
    run_b: str | None,
    step: int | None,
    window_ms: tuple[float, float] | None = None,
    clocks: str | None = None,
    ranks: object = None,
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
                return timeline_view(registry, run_a, run_b, step, window_ms, clocks, ranks)
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


def picker_label(s: RunSource) -> str:
    """The run's name, and its configuration where the name does not say it."""
    config = s.config or "traces"
    return s.label if s.label == config else f"{s.label} ({config})"
