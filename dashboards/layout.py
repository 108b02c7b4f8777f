"""The page: header, run/step pickers, one tab per view, the view's container and the what-if
panel (shown on its tab only, so its scenario survives switching tabs and runs)."""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from dashboards import ids
from dashboards.big_run import MAX_SHOWN_RANKS, PICKER_HIDDEN
from dashboards.data import RunRegistry, default_pair
from dashboards.views import default_target, run_options
from dashboards.whatif import LIMIT_CHOICES, LIMIT_OFF, NETWORK_LABELS, NetworkMode
from overlapscope.config import Policy

TAB_LABELS: dict[str, str] = {
    ids.TAB_OVERVIEW: "Overview",
    ids.TAB_TIMELINE: "Timeline",
    ids.TAB_UNITS: "Units",
    ids.TAB_TRADEOFF: "Trade-off",
    ids.TAB_RANKS: "Ranks",
    ids.TAB_WHATIF: "What-if",
}
# The scenario the what-if panel opens with.
DEFAULT_POLICY = Policy.BACKWARD_PRE.value
DEFAULT_FORWARD_PREFETCH: tuple[str, ...] = ()  # the checklist's value: ("on",) when ticked
DEFAULT_LIMIT = LIMIT_OFF
DEFAULT_NETWORK_MODE = NetworkMode.BANDWIDTH_SCALE.value
DEFAULT_NETWORK_VALUE = 1.0
# In the order of ``views.whatif_view``'s controls.
WHATIF_DEFAULTS: tuple[object, ...] = (
    DEFAULT_POLICY,
    DEFAULT_FORWARD_PREFETCH,
    DEFAULT_LIMIT,
    DEFAULT_NETWORK_MODE,
    DEFAULT_NETWORK_VALUE,
)
HIDDEN = {"display": "none"}
LABEL_STYLE = {"fontWeight": "bold", "fontSize": "13px"}
PAGE_STYLE = {
    "fontFamily": "Inter, Helvetica, Arial, sans-serif",
    "maxWidth": "1400px",
    "margin": "0 auto",
    "padding": "0 16px 24px",
}


def _picker(label: str, component: Any, min_width: str = "220px") -> html.Div:
    return html.Div(
        [html.Label(label, style=LABEL_STYLE), component],
        style={"flex": "1", "minWidth": min_width},
    )


def _schedule_pickers() -> list[html.Div]:
    """The prefetch schedule's controls: policy, forward prefetch, rate limiter."""
    return [
        _picker(
            "Prefetch policy",
            dcc.Dropdown(
                id=ids.WHATIF_POLICY,
                options=[{"label": p.value, "value": p.value} for p in Policy],
                value=DEFAULT_POLICY,
                clearable=False,
            ),
            "160px",
        ),
        _picker(
            "Forward prefetch",
            dcc.Checklist(
                id=ids.WHATIF_FORWARD_PREFETCH,
                options=[{"label": " on", "value": "on"}],
                value=DEFAULT_FORWARD_PREFETCH,
                style={"paddingTop": "6px"},
            ),
            "120px",
        ),
        _picker(
            "Rate limiter (all-gathers in flight)",
            dcc.Dropdown(
                id=ids.WHATIF_LIMIT,
                options=[{"label": "off", "value": LIMIT_OFF}]
                + [{"label": f"K = {k}", "value": k} for k in LIMIT_CHOICES],
                value=DEFAULT_LIMIT,
                clearable=False,
            ),
            "160px",
        ),
    ]


def _network_picker() -> html.Div:
    """The network control: a mode (bandwidth scale or link Gbit/s) and its value."""
    return _picker(
        "Network",
        html.Div(
            [
                dcc.RadioItems(
                    id=ids.WHATIF_NETWORK_MODE,
                    options=[
                        {"label": f" {NETWORK_LABELS[m]}", "value": m.value} for m in NetworkMode
                    ],
                    value=DEFAULT_NETWORK_MODE,
                    inline=True,
                    inputStyle={"marginLeft": "8px"},
                ),
                dcc.Input(
                    id=ids.WHATIF_NETWORK_VALUE,
                    type="number",
                    value=DEFAULT_NETWORK_VALUE,
                    debounce=True,
                    style={"width": "110px"},
                ),
            ]
        ),
        "300px",
    )


def whatif_panel(registry: RunRegistry, run_a: str | None, run_b: str | None) -> html.Div:
    """Scenario controls and the prediction's container; hidden until its tab is chosen."""
    controls = html.Div(
        [
            *_schedule_pickers(),
            _network_picker(),
            _picker(
                "Compare with (measured run)",
                dcc.Dropdown(
                    id=ids.WHATIF_TARGET,
                    options=run_options(registry),
                    value=default_target(registry, run_a, run_b, *WHATIF_DEFAULTS),
                    clearable=True,
                ),
            ),
        ],
        style={"display": "flex", "gap": "16px", "flexWrap": "wrap", "marginBottom": "8px"},
    )
    return html.Div(
        [
            html.H3("What-if: Run A replayed under another configuration"),
            html.P(
                "The simulator calibrates a model of Run A and replays its measured steps under "
                "the scenario (docs/WHATIF.md). 'Compare with' defaults to a run whose run.json "
                "configuration is the scenario's, else Run B.",
                style={"color": "#555", "fontSize": "13px"},
            ),
            controls,
            dcc.Loading(html.Div(id=ids.WHATIF_OUTPUT), delay_show=300),
        ],
        id=ids.WHATIF_PANEL,
        style=HIDDEN,
    )


def _ranks_picker() -> html.Div:
    """Ranks of a run opened with --dask whose step the timeline reads; hidden otherwise
    (``views.rank_picker`` shows it)."""
    dropdown = dcc.Dropdown(
        id=ids.RANKS, options=[], value=[], multi=True, placeholder="the step's critical path"
    )
    label = html.Label(f"Ranks (timeline, at most {MAX_SHOWN_RANKS})", style=LABEL_STYLE)
    return html.Div([label, dropdown], id=ids.RANKS_PICKER, style=PICKER_HIDDEN)


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
                        "Step (timeline, what-if)",
                        dcc.Dropdown(id=ids.STEP, options=[], value=None, clearable=False),
                    ),
                    _ranks_picker(),
                    _picker(
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
            dcc.Tabs(
                id=ids.TABS,
                value=ids.TAB_OVERVIEW,
                children=[
                    dcc.Tab(label=TAB_LABELS[t], value=t, id=f"tab-{t}") for t in ids.TAB_VALUES
                ],
            ),
            dcc.Loading(html.Div(id=ids.VIEW, style={"paddingTop": "8px"}), delay_show=300),
            whatif_panel(registry, run_a, run_b),
        ],
        style=PAGE_STYLE,
    )
