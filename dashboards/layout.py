"""The page: header, run/step pickers, one tab per view and the view's container."""

from __future__ import annotations

from dash import dcc, html

from dashboards import ids
from dashboards.data import RunRegistry, default_pair
from dashboards.views import run_options

TAB_LABELS: dict[str, str] = {
    ids.TAB_OVERVIEW: "Overview",
    ids.TAB_TIMELINE: "Timeline",
    ids.TAB_UNITS: "Units",
    ids.TAB_TRADEOFF: "Trade-off",
    ids.TAB_RANKS: "Ranks",
}
PAGE_STYLE = {
    "fontFamily": "Inter, Helvetica, Arial, sans-serif",
    "maxWidth": "1400px",
    "margin": "0 auto",
    "padding": "0 16px 24px",
}


def _picker(label: str, component: dcc.Dropdown) -> html.Div:
    return html.Div(
        [html.Label(label, style={"fontWeight": "bold", "fontSize": "13px"}), component],
        style={"flex": "1", "minWidth": "220px"},
    )


def build_layout(registry: RunRegistry) -> html.Div:
    run_a, run_b = default_pair(registry.sources)
    options = run_options(registry)
    return html.Div(
        [
            html.H2("overlapscope · communication/compute overlap"),
            html.Div(
                [
                    _picker(
                        "Run A (top / left)",
                        dcc.Dropdown(id=ids.RUN_A, options=options, value=run_a, clearable=False),
                    ),
                    _picker(
                        "Run B (compare; optional)",
                        dcc.Dropdown(id=ids.RUN_B, options=options, value=run_b, clearable=True),
                    ),
                    _picker(
                        "Step (timeline)",
                        dcc.Dropdown(id=ids.STEP, options=[], value=None, clearable=False),
                    ),
                ],
                style={"display": "flex", "gap": "16px", "marginBottom": "12px"},
            ),
            dcc.Tabs(
                id=ids.TABS,
                value=ids.TAB_OVERVIEW,
                children=[
                    dcc.Tab(label=TAB_LABELS[t], value=t, id=f"tab-{t}") for t in ids.TAB_VALUES
                ],
            ),
            dcc.Loading(html.Div(id=ids.VIEW, style={"paddingTop": "8px"}), delay_show=300),
        ],
        style=PAGE_STYLE,
    )
