"""Plotly figures of whole runs (units, trade-off, ranks) built from ``RunAnalysis`` tables;
the timeline figures are in :mod:`dashboards.figures`."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards import palette
from dashboards.figures import base_layout, empty_figure
from dashboards.tables import unit_sort_key
from overlapscope.phases import COMM_PHASES, values


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


# --- trade-off ------------------------------------------------------------------------------


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


# --- ranks ----------------------------------------------------------------------------------


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
    """A mark on each collective's straggler (the rank that started it last)."""
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
