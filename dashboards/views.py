"""The view callback's dispatch, the run and step pickers' options, and the views' typed
functions under one name (callbacks and tests call ``views.*``).

Each view lives in its own module under ``dashboards/tabs/`` and is registered in
``dashboards.tabs.VIEWS``; ``render_view`` looks the tab up there. A run that is unknown,
gone or unreadable becomes an error panel (``error_panel``), never an exception.
"""

from __future__ import annotations

from dash.development.base_component import Component

from dashboards import tabs
from dashboards.components import error_panel, html_table, run_panel
from dashboards.data import RunRegistry
from dashboards.pickers import picker_label, run_options
from dashboards.tabs.base import Request, load_many, selected
from dashboards.tabs.overview import overview_html, overview_view
from dashboards.tabs.ranks import ranks_group_figure, ranks_view
from dashboards.tabs.timeline import rank_picker, timeline_view
from dashboards.tabs.tradeoff import tradeoff_view
from dashboards.tabs.units import units_view
from dashboards.whatif_view import default_target, whatif_html, whatif_view
from overlapscope.errors import UserError

_panel = run_panel
__all__ = [
    "default_target",
    "error_panel",
    "html_table",
    "overview_html",
    "overview_view",
    "picker_label",
    "rank_picker",
    "ranks_group_figure",
    "ranks_view",
    "render_view",
    "run_options",
    "step_options",
    "timeline_view",
    "tradeoff_view",
    "units_view",
    "whatif_html",
    "whatif_view",
]


def step_options(registry: RunRegistry, run_a: str | None, run_b: str | None) -> list[int]:
    """Counted steps of the chosen runs (a run that fails to load contributes none)."""
    runs, _ = load_many(registry, selected(run_a, run_b))
    steps = {int(s) for r in runs for s in r.analysis.steps["step"].unique()}
    return sorted(steps)


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
    """The chosen tab's content (its view in ``tabs.VIEWS``); unknown tabs and run keys, and
    a view's ``UserError``, become an error panel."""
    try:
        for key in (run_a, run_b):
            if key is not None:
                registry.source(key)
        view = tabs.view_of(tab)
        if view is None:
            return [error_panel(f"unknown view {str(tab)[:40]!r}")]
        return view.render(Request(registry, run_a, run_b, step, window_ms, clocks, ranks))
    except UserError as e:
        return [error_panel(str(e))]
