"""The units tab: each FSDP unit's exposed communication per step (a bar per phase), and
each unit's exposed time by cause (a table per run)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from dash import dcc, html
from dash.development.base_component import Component
from plotly.subplots import make_subplots

from dashboards import ids, palette
from dashboards.components import GRAPH_CONFIG, error_panel, html_table
from dashboards.data import RunRegistry
from dashboards.figures import base_layout, empty_figure
from dashboards.tables import unit_sort_key
from dashboards.tabs.base import Request, View, load_many, selected
from dashboards.wait_tables import UNIT_SPLIT_COLUMNS, UNIT_SPLIT_HEADERS, unit_split_table
from overlapscope.phases import COMM_PHASES, values


def units_view(registry: RunRegistry, run_a: str | None, run_b: str | None) -> list[Component]:
    runs, errors = load_many(registry, selected(run_a, run_b))
    if not runs:
        return errors or [error_panel("no run selected")]
    fig = units_figure([(r.source.label, r.analysis.units) for r in runs])
    split = [
        html.Div(
            [
                html.H4(f"Exposed time by cause · {r.source.label} (ms per step, mean over ranks)"),
                html_table(
                    unit_split_table(r.analysis.units),
                    UNIT_SPLIT_COLUMNS,
                    UNIT_SPLIT_HEADERS,
                    f"{ids.UNITS_SPLIT}-{i}",
                ),
            ]
        )
        for i, r in enumerate(runs)
    ]
    graph = dcc.Graph(id=ids.UNITS_GRAPH, figure=fig, config=GRAPH_CONFIG)
    return [*errors, graph, html.Div(split, id=ids.UNITS_SPLIT)]


def units_figure(panels: Sequence[tuple[str, pd.DataFrame]]) -> go.Figure:
    """Per-unit exposed all-gather (forward, backward) and reduce-scatter, ms per step.

    ``panels``: (title, ``RunAnalysis.units``). Kinds of one phase are summed per rank, then
    the mean over ranks is drawn.
    """
    if not panels:
        return empty_figure("no run selected")
    fig = make_subplots(
        rows=1, cols=len(panels), shared_yaxes=True, subplot_titles=[t for t, _ in panels]
    )
    shown: set[str] = set()
    for col, (_, units) in enumerate(panels, start=1):
        u = units.assign(phase=units["phase"].astype(str), unit=units["unit"].astype(str))
        u = u[u["phase"].isin(values(COMM_PHASES))]
        per_rank = u.groupby(["rank", "unit", "phase"], as_index=False)["exposed_per_step_us"].sum()
        mean = per_rank.groupby(["unit", "phase"], as_index=False)["exposed_per_step_us"].mean()
        order = sorted(mean["unit"].unique(), key=unit_sort_key)
        for phase in values(COMM_PHASES):
            rows = mean[mean["phase"] == phase].set_index("unit").reindex(order)
            if rows["exposed_per_step_us"].isna().all():
                continue
            fig.add_trace(
                go.Bar(
                    x=order,
                    y=rows["exposed_per_step_us"] / 1e3,
                    name=f"exposed {palette.phase_name(phase)}",
                    legendgroup=phase,
                    showlegend=phase not in shown,
                    marker_color=palette.phase_colour(phase),
                    hovertemplate="unit %{x}<br>"
                    + palette.phase_name(phase)
                    + ": %{y:.3f} ms/step exposed<extra></extra>",
                ),
                row=1,
                col=col,
            )
            shown.add(phase)
        fig.update_xaxes(
            title_text="FSDP unit", categoryorder="array", categoryarray=order, row=1, col=col
        )
    fig.update_yaxes(title_text="exposed time (ms per step, mean over ranks)", row=1, col=1)
    fig.update_layout(barmode="group")
    return base_layout(fig, "Exposed communication per unit", 520)


def _render(request: Request) -> list[Component]:
    return units_view(request.registry, request.run_a, request.run_b)


VIEW = View(key=ids.TAB_UNITS, label="Units", render=_render, graphs=(ids.UNITS_GRAPH,))
