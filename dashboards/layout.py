"""The page: header, run/step pickers, one tab per view of ``tabs.VIEWS``, the shown view's
container and the panels of views that keep one in the page (the what-if scenario, shown on
its tab only, so it survives switching tabs and runs)."""

from __future__ import annotations

from dash import dcc, html

from dashboards import ids, tabs
from dashboards.big_run import MAX_SHOWN_RANKS, PICKER_HIDDEN
from dashboards.data import RunRegistry, default_pair
from dashboards.pickers import LABEL_STYLE, picker, run_options

PAGE_STYLE = {
    "fontFamily": "Inter, Helvetica, Arial, sans-serif",
    "maxWidth": "1400px",
    "margin": "0 auto",
    "padding": "0 16px 24px",
}


def _ranks_picker() -> html.Div:
    """Ranks of a run opened with --dask whose step the timeline reads; hidden otherwise
    (``tabs.timeline.rank_picker`` shows it)."""
    dropdown = dcc.Dropdown(
        id=ids.RANKS, options=[], value=[], multi=True, placeholder="the step's critical path"
    )
    label = html.Label(f"Ranks (timeline, at most {MAX_SHOWN_RANKS})", style=LABEL_STYLE)
    return html.Div([label, dropdown], id=ids.RANKS_PICKER, style=PICKER_HIDDEN)


def build_layout(registry: RunRegistry) -> html.Div:
    run_a, run_b = default_pair(registry.sources)
    options = run_options(registry)
    views = tabs.VIEWS
    return html.Div(
        [
            html.H2("overlapscope · communication/compute overlap"),
            html.Div(
                [
                    picker(
                        "Run A (top / left)",
                        dcc.Dropdown(id=ids.RUN_A, options=options, value=run_a, clearable=False),
                    ),
                    picker(
                        "Run B (compare; optional)",
                        dcc.Dropdown(id=ids.RUN_B, options=options, value=run_b, clearable=True),
                    ),
                    picker(
                        "Step (timeline, what-if)",
                        dcc.Dropdown(id=ids.STEP, options=[], value=None, clearable=False),
                    ),
                    _ranks_picker(),
                    picker(
                        "Clocks (timeline)",
                        dcc.RadioItems(
                            id=ids.CLOCKS,
                            options=[
                                {"label": "aligned", "value": "aligned"},
                                {"label": "raw", "value": "raw"},
                            ],
                            value="aligned",
                            inline=True,
                        ),
                    ),
                ],
                style={"display": "flex", "gap": "16px", "marginBottom": "12px"},
            ),
            html.Div(id=ids.PERFETTO_LINKS, style={"marginBottom": "8px"}),
            dcc.Tabs(
                id=ids.TABS,
                value=views[0].key,
                children=[dcc.Tab(label=v.label, value=v.key, id=f"tab-{v.key}") for v in views],
            ),
            dcc.Loading(html.Div(id=ids.VIEW, style={"paddingTop": "8px"}), delay_show=300),
            *(v.panel(registry, run_a, run_b) for v in views if v.panel is not None),
        ],
        style=PAGE_STYLE,
    )
