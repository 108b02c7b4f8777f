"""The ranks tab: where each rank's GPU waits (by cause), what the host did meanwhile, each
rank's waiting for peers per collective (of one process group, picked), the stragglers, and
the Flight Recorder's verdict where the run carries dumps."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
from dash import Dash, Input, Output, State, dcc, html
from dash.development.base_component import Component
from plotly.subplots import make_subplots

from dashboards import ids, palette
from dashboards.components import GRAPH_CONFIG, error_panel, html_table
from dashboards.data import RunRegistry
from dashboards.figures import base_layout, empty_figure
from dashboards.flight_panel import flight_panel
from dashboards.groups import EVERY, group_picker, of_group
from dashboards.tables import straggler_summary
from dashboards.tabs.base import Request, View, load_many
from dashboards.wait_tables import HOST_OP_COLUMNS, HOST_OP_HEADERS, host_ops_table


def ranks_group_figure(registry: RunRegistry, run_a: str | None, group: str | None) -> Any:
    """The ranks' heat map of the collectives of ``group`` (None: every group)."""
    runs, _ = load_many(registry, [run_a])
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
    runs, errors = load_many(registry, [run_a])
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


def waits_figure(ranks: pd.DataFrame) -> go.Figure:
    """Where each rank's GPU waits, ms per step: its idle by cause and its exposed
    communication by cause, stacked (each group adds up to the partition's figure)."""
    parts = [p for p in palette.WAIT_PARTS if p[0] in ranks]
    if ranks.empty or not parts:
        return empty_figure("no ranks")
    x = [f"rank {int(r)}" for r in ranks["rank"]]
    fig = go.Figure()
    for column, name, colour in parts:
        fig.add_trace(
            go.Bar(
                x=x,
                y=ranks[column].to_numpy() / 1e3,
                name=name,
                marker_color=colour,
                hovertemplate="%{x}<br>" + name + ": %{y:.3f} ms/step<extra></extra>",
            )
        )
    fig.update_yaxes(title_text="ms per step")
    fig.update_layout(barmode="stack")
    return base_layout(fig, "Where the GPU waits: idle and exposed communication by cause", 460)


def _labelled(collectives: pd.DataFrame) -> pd.DataFrame:
    """The collectives in time order, each with a ``label`` (``s<step>#<seq> unit phase``,
    prefixed by the group when there is more than one)."""
    coll = collectives.sort_values(["step", "start_us", "seq"]).reset_index(drop=True)
    multi_group = coll["group"].nunique() > 1
    label = (
        "s"
        + coll["step"].astype(str)
        + "#"
        + coll["seq"].astype(str)
        + " "
        + coll["unit"].astype("string").fillna("-")
        + " "
        + coll["phase"].astype("string").fillna("-")
    )
    if multi_group:
        label = coll["group"].astype(str) + ":" + label
    return coll.assign(label=label)


def _straggler_marks(coll: pd.DataFrame) -> go.Scatter:
    """A mark on each collective's straggler (the rank that started it last, where its lag
    exceeds the clocks' uncertainty: collectives.py names no straggler otherwise)."""
    coll = coll[coll["straggler_rank"].notna()]
    return go.Scatter(
        x=coll["label"],
        y=[f"rank {int(r)}" for r in coll["straggler_rank"]],
        mode="markers",
        marker={"symbol": "x-thin", "size": 9, "line": {"width": 2, "color": "#111"}},
        name="straggler (started last)",
        customdata=coll["straggler_lag_us"] / 1e3,
        hovertemplate="%{x}<br>%{y} started last, %{customdata:.3f} ms late<extra></extra>",
    )


def ranks_figure(collectives: pd.DataFrame, collective_ranks: pd.DataFrame) -> go.Figure:
    """Heat map of each rank's waiting-for-peers per collective, transfer time above it,
    the straggler (last to start) of each collective marked."""
    if collectives.empty:
        return empty_figure("no collectives matched across ranks")
    keys = ["group", "step", "seq"]
    coll = _labelled(collectives)
    cr = collective_ranks.merge(coll[[*keys, "label"]], on=keys, how="inner")
    z = cr.pivot_table(index="rank", columns="label", values="peer_wait_us", aggfunc="sum")
    dur = cr.pivot_table(index="rank", columns="label", values="dur_us", aggfunc="sum")
    z = z.reindex(columns=coll["label"])
    dur = dur.reindex(index=z.index, columns=coll["label"])
    ranks = [f"rank {r}" for r in z.index]
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        row_heights=[0.3, 0.7],
        vertical_spacing=0.06,
        subplot_titles=["transfer time (fastest rank)", "waiting for peers per rank"],
    )
    fig.add_trace(
        go.Bar(
            x=coll["label"],
            y=coll["transfer_us"] / 1e3,
            marker_color=[palette.phase_colour(str(p)) for p in coll["phase"].astype(str)],
            name="transfer",
            showlegend=False,
            hovertemplate="%{x}<br>transfer %{y:.3f} ms<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Heatmap(
            z=z.to_numpy() / 1e3,
            x=list(z.columns),
            y=ranks,
            customdata=dur.to_numpy() / 1e3,
            colorscale=palette.HEATMAP_SCALE,
            colorbar={"title": {"text": "peer wait (ms)"}, "len": 0.65, "y": 0.35},
            hovertemplate="%{y}, %{x}<br>waiting for peers %{z:.3f} ms"
            "<br>duration on this rank %{customdata:.3f} ms<extra></extra>",
        ),
        row=2,
        col=1,
    )
    fig.add_trace(_straggler_marks(coll), row=2, col=1)
    fig.update_yaxes(title_text="ms", row=1, col=1)
    fig.update_yaxes(title_text="rank", autorange="reversed", row=2, col=1)
    fig.update_xaxes(title_text="collective (step#seq unit phase)", tickangle=-60, row=2, col=1)
    fig.update_xaxes(showticklabels=False, row=1, col=1)
    return base_layout(fig, "Ranks: waiting for peers vs transfer, per collective", 640)


def _register(app: Dash, registry: RunRegistry) -> None:
    """The process-group picker redraws the heat map."""

    @app.callback(
        Output(ids.RANKS_GRAPH, "figure"),
        Input(ids.GROUP, "value"),
        State(ids.RUN_A, "value"),
        prevent_initial_call=True,
    )
    def _group(group: Any, run_a: Any) -> Any:
        return ranks_group_figure(registry, run_a, group)


def _render(request: Request) -> list[Component]:
    return ranks_view(request.registry, request.run_a)


VIEW = View(
    key=ids.TAB_RANKS,
    label="Ranks",
    render=_render,
    graphs=(ids.RANKS_GRAPH, ids.WAITS_GRAPH),
    register=_register,
)
