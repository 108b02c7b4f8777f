"""Thin callbacks: each forwards small keys (tab, run keys, step) to a function in ``views``."""

from __future__ import annotations

import re
from typing import Any

import plotly.graph_objects as go
from dash import Dash, Input, Output, State, no_update

from dashboards import ids, views
from dashboards.data import RunRegistry
from dashboards.figures import MAX_BARS
from dashboards.zoom import x_window
from overlapscope.errors import UserError

_RANGE_KEY = re.compile(r"^xaxis\d*\.range\[([01])\]$")


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
    children = views.timeline_view(
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


def whatif_panel_style(tab: str | None) -> dict[str, str]:
    return {} if tab == ids.TAB_WHATIF else {"display": "none"}


# The what-if scenario controls, in ``views.whatif_view``'s order.
WHATIF_CONTROLS: tuple[str, ...] = (
    ids.WHATIF_POLICY,
    ids.WHATIF_FORWARD_PREFETCH,
    ids.WHATIF_LIMIT,
    ids.WHATIF_NETWORK_MODE,
    ids.WHATIF_NETWORK_VALUE,
)


def register(app: Dash, registry: RunRegistry) -> None:
    """Wire every callback of the app to the views over ``registry``."""
    _register_views(app, registry)
    _register_whatif(app, registry)


def _register_views(app: Dash, registry: RunRegistry) -> None:
    """The step picker, the chosen tab's view and the timeline's zoom."""

    @app.callback(
        Output(ids.STEP, "options"),
        Output(ids.STEP, "value"),
        Input(ids.RUN_A, "value"),
        Input(ids.RUN_B, "value"),
        State(ids.STEP, "value"),
    )
    def _steps(run_a: str | None, run_b: str | None, current: int | None) -> tuple[Any, Any]:
        steps = views.step_options(registry, run_a, run_b)
        value = current if current in steps else (steps[0] if steps else None)
        return [{"label": f"step {s}", "value": s} for s in steps], value

    @app.callback(
        Output(ids.RANKS, "options"),
        Output(ids.RANKS, "value"),
        Output(ids.RANKS_PICKER, "style"),
        Input(ids.RUN_A, "value"),
        Input(ids.RUN_B, "value"),
    )
    def _ranks(run_a: str | None, run_b: str | None) -> tuple[Any, Any, Any]:
        options, style = views.rank_picker(registry, run_a, run_b)
        return options, [], style  # another run: its default ranks again

    @app.callback(
        Output(ids.VIEW, "children"),
        Input(ids.TABS, "value"),
        Input(ids.RUN_A, "value"),
        Input(ids.RUN_B, "value"),
        Input(ids.STEP, "value"),
        Input(ids.CLOCKS, "value"),
        Input(ids.RANKS, "value"),
    )
    def _view(tab: str, run_a: Any, run_b: Any, step: Any, clocks: Any, ranks: Any) -> Any:
        return views.render_view(registry, tab, run_a, run_b, step, clocks=clocks, ranks=ranks)

    @app.callback(
        Output(ids.RANKS_GRAPH, "figure"),
        Input(ids.GROUP, "value"),
        State(ids.RUN_A, "value"),
        prevent_initial_call=True,
    )
    def _group(group: Any, run_a: Any) -> Any:
        return views.ranks_group_figure(registry, run_a, group)

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


def _register_whatif(app: Dash, registry: RunRegistry) -> None:
    """The what-if panel: shown on its tab, its default target, and the prediction."""

    @app.callback(Output(ids.WHATIF_PANEL, "style"), Input(ids.TABS, "value"))
    def _whatif_shown(tab: str | None) -> dict[str, str]:
        return whatif_panel_style(tab)

    controls = [Input(c, "value") for c in WHATIF_CONTROLS]

    @app.callback(
        Output(ids.WHATIF_TARGET, "value"),
        Input(ids.RUN_A, "value"),
        Input(ids.RUN_B, "value"),
        *controls,
        prevent_initial_call=True,  # the layout holds the default scenario's target
    )
    def _whatif_target(run_a: str | None, run_b: str | None, *scenario: object) -> Any:
        return views.default_target(registry, run_a, run_b, *scenario)

    @app.callback(
        Output(ids.WHATIF_OUTPUT, "children"),
        Input(ids.TABS, "value"),
        Input(ids.RUN_A, "value"),
        Input(ids.STEP, "value"),
        Input(ids.WHATIF_TARGET, "value"),
        *controls,
    )
    def _whatif(tab: str, run_a: Any, step: Any, target: Any, *scenario: object) -> Any:
        if tab != ids.TAB_WHATIF:  # other tabs never wait for a calibration
            return no_update
        return views.whatif_view(registry, run_a, target, step, *scenario)
