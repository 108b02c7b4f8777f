"""The trade-off tab: step time against peak memory, one point per run."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from dash import dcc
from dash.development.base_component import Component

from dashboards import ids, palette
from dashboards.components import GRAPH_CONFIG
from dashboards.data import RunRegistry
from dashboards.figures import base_layout, empty_figure
from dashboards.tables import overview_table, tradeoff_table
from dashboards.tabs.base import Request, View, load_many


def tradeoff_view(registry: RunRegistry) -> list[Component]:
    runs, errors = load_many(registry, [s.key for s in registry.sources])
    fig = tradeoff_figure(tradeoff_table(overview_table(runs)))
    return [*errors, dcc.Graph(id=ids.TRADEOFF_GRAPH, figure=fig, config=GRAPH_CONFIG)]


def tradeoff_figure(tradeoff: pd.DataFrame) -> go.Figure:
    """Step time against peak memory, one point per run (``tables.tradeoff_table``)."""
    if tradeoff.empty:
        return empty_figure("no runs loaded")
    fig = go.Figure()
    for i, row in enumerate(tradeoff.itertuples(index=False)):
        fig.add_trace(
            go.Scatter(
                x=[row.peak_mem_mib],
                y=[row.step_ms],
                mode="markers+text",
                text=[row.policy],
                textposition="top center",
                name=f"{row.run} ({row.policy})",
                marker={
                    "size": 16,
                    "color": palette.RUN_COLOURS[i % len(palette.RUN_COLOURS)],
                    "line": {"width": 1, "color": "#333"},
                },
                customdata=[[row.throughput_tok_s, row.exposed_comm_per_step_ms]],
                hovertemplate=f"<b>{row.run}</b><br>policy {row.policy}<br>"
                "peak memory %{x:.1f} MiB<br>step time %{y:.1f} ms<br>"
                "throughput %{customdata[0]:,.0f} tokens/s<br>"
                "exposed comm %{customdata[1]:.1f} ms/step<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="peak memory (MiB, max over ranks)")
    fig.update_yaxes(title_text="step time (ms, mean over ranks)", rangemode="tozero")
    return base_layout(fig, "Trade-off: step time vs peak memory (lower-left is better)", 540)


def _render(request: Request) -> list[Component]:
    return tradeoff_view(request.registry)


VIEW = View(key=ids.TAB_TRADEOFF, label="Trade-off", render=_render, graphs=(ids.TRADEOFF_GRAPH,))
