"""Thin callbacks: each forwards small keys (tab, run keys, step) to a function in ``views``;
each view's own callbacks are wired by the view (``View.register``, dashboards/tabs/)."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, State

from dashboards import ids, tabs, views
from dashboards.data import RunRegistry


def register(app: Dash, registry: RunRegistry) -> None:
    """Wire every callback of the app to the views over ``registry``: the page's pickers, the
    shown view, then each view's own."""
    _register_page(app, registry)
    for view in tabs.VIEWS:
        if view.register is not None:
            view.register(app, registry)


def _register_page(app: Dash, registry: RunRegistry) -> None:
    """The step picker, the ranks picker and the chosen tab's view."""

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
