"""The what-if tab: Run A replayed under another prefetch schedule or network (dashboards/
whatif.py runs the simulator; dashboards/whatif_view.py draws its prediction).

Its scenario controls are a panel always in the page, hidden on the other tabs, so the
scenario survives a change of tab or run; the tab's own content is empty.
"""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, dcc, html, no_update
from dash.development.base_component import Component

from dashboards import ids
from dashboards.data import RunRegistry
from dashboards.pickers import HIDDEN, picker, run_options
from dashboards.tabs.base import Request, View
from dashboards.whatif import LIMIT_CHOICES, LIMIT_OFF, NETWORK_LABELS, NetworkMode
from dashboards.whatif_view import default_target, whatif_view
from overlapscope.config import Policy

# The scenario the what-if panel opens with.
DEFAULT_POLICY = Policy.BACKWARD_PRE.value
DEFAULT_FORWARD_PREFETCH: tuple[str, ...] = ()  # the checklist's value: ("on",) when ticked
DEFAULT_LIMIT = LIMIT_OFF
DEFAULT_NETWORK_MODE = NetworkMode.BANDWIDTH_SCALE.value
DEFAULT_NETWORK_VALUE = 1.0
# In the order of ``whatif_view``'s controls.
WHATIF_DEFAULTS: tuple[object, ...] = (
    DEFAULT_POLICY,
    DEFAULT_FORWARD_PREFETCH,
    DEFAULT_LIMIT,
    DEFAULT_NETWORK_MODE,
    DEFAULT_NETWORK_VALUE,
)

# The what-if scenario controls, in ``whatif_view``'s order.
WHATIF_CONTROLS: tuple[str, ...] = (
    ids.WHATIF_POLICY,
    ids.WHATIF_FORWARD_PREFETCH,
    ids.WHATIF_LIMIT,
    ids.WHATIF_NETWORK_MODE,
    ids.WHATIF_NETWORK_VALUE,
)


def _schedule_pickers() -> list[html.Div]:
    """The prefetch schedule's controls: policy, forward prefetch, rate limiter."""
    return [
        picker(
            "Prefetch policy",
            dcc.Dropdown(
                id=ids.WHATIF_POLICY,
                options=[{"label": p.value, "value": p.value} for p in Policy],
                value=DEFAULT_POLICY,
                clearable=False,
            ),
            "160px",
        ),
        picker(
            "Forward prefetch",
            dcc.Checklist(
                id=ids.WHATIF_FORWARD_PREFETCH,
                options=[{"label": " on", "value": "on"}],
                value=DEFAULT_FORWARD_PREFETCH,
                style={"paddingTop": "6px"},
            ),
            "120px",
        ),
        picker(
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
    return picker(
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


def _panel(registry: RunRegistry, run_a: str | None, run_b: str | None) -> html.Div:
    """Scenario controls and the prediction's container; hidden until its tab is chosen."""
    controls = html.Div(
        [
            *_schedule_pickers(),
            _network_picker(),
            picker(
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


def _register(app: Dash, registry: RunRegistry) -> None:
    """The what-if panel: shown on its tab, its default target, and the prediction."""

    @app.callback(Output(ids.WHATIF_PANEL, "style"), Input(ids.TABS, "value"))
    def _whatif_shown(tab: str | None) -> dict[str, str]:
        return {} if tab == ids.TAB_WHATIF else HIDDEN

    controls = [Input(c, "value") for c in WHATIF_CONTROLS]

    @app.callback(
        Output(ids.WHATIF_TARGET, "value"),
        Input(ids.RUN_A, "value"),
        Input(ids.RUN_B, "value"),
        *controls,
        prevent_initial_call=True,  # the layout holds the default scenario's target
    )
    def _whatif_target(run_a: str | None, run_b: str | None, *scenario: object) -> Any:
        return default_target(registry, run_a, run_b, *scenario)

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
        return whatif_view(registry, run_a, target, step, *scenario)


def _render(request: Request) -> list[Component]:
    return []  # the what-if panel is its own container (``_panel``)


VIEW = View(
    key=ids.TAB_WHATIF,
    label="What-if",
    render=_render,
    graphs=(ids.WHATIF_GRAPH,),
    register=_register,
    panel=_panel,
)
