"""The timeline tab: the chosen step of each chosen run, lanes per rank, its critical path
drawn over it; a zoom redraws the zoomed range (at full detail where it holds few enough
bars). The figure is :func:`dashboards.figures.timeline_figure` (shared with the what-if tab).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import plotly.graph_objects as go
from dash import Dash, Input, Output, State, dcc, html, no_update
from dash.development.base_component import Component

from dashboards import ids
from dashboards.big_run import PICKER_HIDDEN, PICKER_SHOWN, chosen_step, rank_options, step_view
from dashboards.components import GRAPH_CONFIG, error_panel, run_panel
from dashboards.critical_path import add_paths, clock_mode, panel_path
from dashboards.data import LoadedRun, RunRegistry
from dashboards.figures import MAX_BARS, TimelinePanel, timeline_figure
from dashboards.tabs.base import Request, View, load_many, selected
from dashboards.zoom import x_window
from overlapscope.errors import UserError


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
    runs, errors = load_many(registry, selected(run_a, run_b))
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
    runs, _ = load_many(registry, selected(run_a, run_b))
    big = [r for r in runs if r.timelines is not None]
    return (rank_options(big), PICKER_SHOWN) if big else ([], PICKER_HIDDEN)


def parse_window(relayout: dict[str, Any] | None) -> tuple[float, float] | str | None:
    """A zoom's x range in ms; ``"auto"`` for a reset; None when the x range did not change."""
    return x_window(relayout)  # type-checked: a client may send anything


def windowed_timeline(
    registry: RunRegistry,
    run_a: str | None,
    run_b: str | None,
    step: int | None,
    relayout: dict[str, Any] | None,
    clocks: str | None = None,
    ranks: object = None,
) -> go.Figure | None:
    """The timeline redrawn for a zoomed range, or None when redrawing would change nothing
    (every panel already fits in ``MAX_BARS``, or the zoom did not move the x axis); a run
    opened with ``--dask`` is always redrawn (its step is read again, for its ranks)."""
    window = parse_window(relayout)
    if window is None:
        return None
    try:
        runs = [registry.load(k) for k in {run_a, run_b} if k is not None]
    except UserError:
        return None
    if all(r.timelines is None and len(r.analysis.timeline) <= MAX_BARS for r in runs):
        return None
    children = timeline_view(
        registry,
        run_a,
        run_b,
        step,
        None if window == "auto" else window,  # type: ignore[arg-type]
        clocks,
        ranks,
    )
    graph = children[-1]
    figure = getattr(graph, "figure", None)
    return figure if isinstance(figure, go.Figure) else None


def _register(app: Dash, registry: RunRegistry) -> None:
    """The timeline's zoom."""

    @app.callback(
        Output(ids.TIMELINE_GRAPH, "figure"),
        Input(ids.TIMELINE_GRAPH, "relayoutData"),
        State(ids.RUN_A, "value"),
        State(ids.RUN_B, "value"),
        State(ids.STEP, "value"),
        State(ids.CLOCKS, "value"),
        State(ids.RANKS, "value"),
        prevent_initial_call=True,
    )
    def _zoom(relayout: Any, run_a: Any, run_b: Any, step: Any, clocks: Any, ranks: Any) -> Any:
        fig = windowed_timeline(registry, run_a, run_b, step, relayout, clocks, ranks)
        return no_update if fig is None else fig


def _render(r: Request) -> list[Component]:
    return timeline_view(r.registry, r.run_a, r.run_b, r.step, r.window_ms, r.clocks, r.ranks)


VIEW = View(
    key=ids.TAB_TIMELINE,
    label="Timeline",
    render=_render,
    graphs=(ids.TIMELINE_GRAPH,),
    register=_register,
)
