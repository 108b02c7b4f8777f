"""Plotly figures built from ``RunAnalysis`` tables only; no metric is re-derived here.

The timeline draws one bar trace per (panel, phase) plus one for exposed communication, so
the trace count is bounded by the phase vocabulary whatever the number of events; above
``MAX_BARS`` rows in a panel, intervals of the same lane and phase closer than one pixel
(``span / MERGE_PIXELS``) are merged into one bar (hover gives the count), coarsening by
doubling until at most ``MAX_BARS`` remain, which keeps a 100k-event step drawable in well
under a second (``benchmarks/timeline_render.py``). ``window_ms`` redraws only a zoomed
range, at full detail when it holds few enough events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards import palette

MAX_BARS = 4000
MERGE_PIXELS = 1500
FONT = {"family": "Inter, Helvetica, Arial, sans-serif", "size": 13}
EXPOSED_PHASE = "exposed"


def base_layout(
    fig: go.Figure, title: str, height: int, *, legend_right: bool = False, top: int = 110
) -> go.Figure:
    """Title at the top, legend under it (or on the right), plot area below both."""
    legend = (
        {"orientation": "v", "yanchor": "top", "y": 1, "x": 1.01, "xanchor": "left"}
        if legend_right
        else {
            "orientation": "h",
            "yref": "container",
            "yanchor": "top",
            "y": 1 - 48 / height,
            "x": 0,
            "xanchor": "left",
        }
    )
    fig.update_layout(
        title={
            "text": title,
            "x": 0.01,
            "xanchor": "left",
            "yref": "container",
            "y": 1 - 22 / height,
        },
        template="plotly_white",
        font=FONT,
        height=height,
        margin={"l": 70, "r": 30, "t": top, "b": 60},
        legend=legend,
    )
    return fig


def empty_figure(message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, font={"size": 16})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return base_layout(fig, "", 300)


# --- timeline -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TimelinePanel:
    """One run's rows of one step: ``timeline`` and ``exposed`` as in ``RunAnalysis``."""

    title: str
    timeline: pd.DataFrame
    exposed: pd.DataFrame
    origin_us: float


def step_panel(
    title: str, timeline: pd.DataFrame, exposed: pd.DataFrame, steps: pd.DataFrame, step: int
) -> TimelinePanel:
    """The rows of ``step``: timeline rows of that step, exposed intervals inside its window."""
    rows = steps[steps["step"] == step]
    if rows.empty:
        raise ValueError(f"step {step} is not in this run")
    start, end = float(rows["start_us"].min()), float(rows["end_us"].max())
    tl = timeline[timeline["step"] == step]
    ex = exposed[(exposed["end_us"] > start) & (exposed["start_us"] < end)]
    ex = ex.assign(start_us=ex["start_us"].clip(lower=start), end_us=ex["end_us"].clip(upper=end))
    return TimelinePanel(title=title, timeline=tl, exposed=ex, origin_us=start)


def lane_label(rank: int, lane: str) -> str:
    return f"rank {rank} · {lane}"


def _bars(panel: TimelinePanel) -> pd.DataFrame:
    """Rows to draw: y (lane label), phase, start/end in ms from the step start, and hover."""
    tl = panel.timeline
    phase = tl["phase"].astype("string").fillna(palette.UNKNOWN_PHASE)
    lanes = phase.map(palette.phase_lane)
    bars = pd.DataFrame(
        {
            "rank": tl["rank"].astype(int).to_numpy(),
            "lane": lanes.to_numpy(),
            "phase": phase.to_numpy(),
            "unit": tl["unit"].astype("string").fillna("-").to_numpy(),
            "t0": (tl["start_us"].to_numpy() - panel.origin_us) / 1e3,
            "t1": (tl["end_us"].to_numpy() - panel.origin_us) / 1e3,
            "dur_us": tl["dur_us"].to_numpy(),
            "bytes": tl["bytes"].clip(lower=0).to_numpy(),
            "n": 1,
        }
    )
    ex = panel.exposed
    exposed = pd.DataFrame(
        {
            "rank": ex["rank"].astype(int).to_numpy(),
            "lane": palette.LANE_EXPOSED,
            "phase": EXPOSED_PHASE,
            "unit": "-",
            "t0": (ex["start_us"].to_numpy() - panel.origin_us) / 1e3,
            "t1": (ex["end_us"].to_numpy() - panel.origin_us) / 1e3,
            "dur_us": ex["dur_us"].to_numpy(),
            "bytes": 0,
            "n": 1,
        }
    )
    out = pd.concat([bars, exposed], ignore_index=True)
    out["y"] = "rank " + out["rank"].astype(str) + " · " + out["lane"].astype(str)
    return out


def merge_close(bars: pd.DataFrame, tol_ms: float) -> pd.DataFrame:
    """Merge bars of the same (y, phase) whose gap is under ``tol_ms`` (vectorised).

    Merged bars keep the first unit, sum durations, bytes and counts; ``t1`` is the latest end.
    """
    b = bars.sort_values(["y", "phase", "t0"], kind="stable").reset_index(drop=True)
    key = b["y"] + "\0" + b["phase"]
    reach = b.groupby(key, sort=False)["t1"].cummax()
    prev_reach = reach.groupby(key, sort=False).shift()
    new = prev_reach.isna() | (b["t0"] > prev_reach + tol_ms)
    seg = new.cumsum()
    g = b.groupby(seg, sort=False)
    return pd.DataFrame(
        {
            "rank": g["rank"].first(),
            "lane": g["lane"].first(),
            "phase": g["phase"].first(),
            "unit": g["unit"].first(),
            "t0": g["t0"].min(),
            "t1": g["t1"].max(),
            "dur_us": g["dur_us"].sum(),
            "bytes": g["bytes"].sum(),
            "n": g["n"].sum(),
            "y": g["y"].first(),
        }
    ).reset_index(drop=True)


def window_bars(
    bars: pd.DataFrame, window_ms: tuple[float, float] | None, max_bars: int
) -> pd.DataFrame:
    """Keep what intersects ``window_ms``; merge sub-pixel neighbours above ``max_bars``."""
    if window_ms is not None:
        lo, hi = window_ms
        bars = bars[(bars["t1"] >= lo) & (bars["t0"] <= hi)]
    if len(bars) <= max_bars:
        return bars
    lo = float(bars["t0"].min()) if window_ms is None else window_ms[0]
    hi = float(bars["t1"].max()) if window_ms is None else window_ms[1]
    span = max(hi - lo, 1e-9)
    tol = span / MERGE_PIXELS
    merged = merge_close(bars, tol)
    # Still too many (events spread evenly, each more than a pixel apart): coarsen.
    while len(merged) > max_bars and tol < span:
        tol *= 2
        merged = merge_close(merged, tol)
    return merged


def _hover(b: pd.DataFrame) -> np.ndarray:
    names = b["phase"].map(lambda p: palette.phase_name(p) if p != EXPOSED_PHASE else "exposed")
    return np.column_stack(
        [
            b["unit"].to_numpy(),
            names.to_numpy(),
            (b["dur_us"] / 1e3).to_numpy(),
            (b["bytes"] / 2**20).to_numpy(),
            b["n"].to_numpy(),
        ]
    )


HOVER_TEMPLATE = (
    "<b>%{y}</b><br>unit %{customdata[0]}<br>phase %{customdata[1]}<br>"
    "start %{base:.3f} ms, duration %{customdata[2]:.3f} ms<br>"
    "%{customdata[3]:.2f} MiB<br>%{customdata[4]} event(s)<extra></extra>"
)


TIMELINE_TITLE = "Timeline: one step, lanes per rank"
WHATIF_TITLE = "What-if: the predicted step above the measured one(s), lanes per rank"


def _add_lane_bars(fig: go.Figure, b: pd.DataFrame, row: int, shown: set[str]) -> None:
    """One panel's bars (one trace per phase, in the legend once: ``shown`` collects the
    phases already there) and its lanes ordered by rank, then lane."""
    for phase, rows in b.groupby("phase", sort=False):
        phase = str(phase)
        colour = palette.EXPOSED_COLOUR if phase == EXPOSED_PHASE else palette.phase_colour(phase)
        name = "exposed communication" if phase == EXPOSED_PHASE else palette.phase_name(phase)
        fig.add_trace(
            go.Bar(
                orientation="h",
                y=rows["y"],
                base=rows["t0"],
                x=(rows["t1"] - rows["t0"]),
                name=name,
                legendgroup=phase,
                showlegend=phase not in shown,
                marker={"color": colour, "line": {"width": 0}},
                customdata=_hover(rows),
                hovertemplate=HOVER_TEMPLATE,
            ),
            row=row,
            col=1,
        )
        shown.add(phase)
    order = sorted(
        b["y"].unique(),
        key=lambda y: (int(y.split(" ")[1]), palette.LANES.index(y.split(" · ")[1])),
    )
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(order)), row=row, col=1)


def timeline_figure(
    panels: Sequence[TimelinePanel],
    *,
    window_ms: tuple[float, float] | None = None,
    max_bars: int = MAX_BARS,
    title: str = TIMELINE_TITLE,
) -> go.Figure:
    """Lanes per rank (compute, all-gather, reduce-scatter, wait, exposed) per panel, stacked
    on one shared time axis (ms since each panel's step start)."""
    if not panels:
        return empty_figure("no run selected")
    heights = []
    panel_bars = []
    for p in panels:
        b = window_bars(_bars(p), window_ms, max_bars)
        panel_bars.append(b)
        heights.append(max(len(b["y"].unique()), 1))
    fig = make_subplots(
        rows=len(panels),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12 if len(panels) > 1 else 0.05,
        subplot_titles=[p.title for p in panels],
        row_heights=[float(h) for h in heights],
    )
    shown: set[str] = set()
    for row, b in enumerate(panel_bars, start=1):
        _add_lane_bars(fig, b, row, shown)
    fig.update_layout(barmode="overlay", bargap=0.25, uirevision="timeline")
    fig.update_xaxes(title_text="time since step start (ms)", row=len(panels), col=1)
    if window_ms is not None:
        fig.update_xaxes(range=list(window_ms))
    height = 140 + sum(heights) * 28 + 80 * len(panels)
    return base_layout(fig, title, height, legend_right=True, top=70)


def whatif_figure(predicted: TimelinePanel, measured: Sequence[TimelinePanel]) -> go.Figure:
    """The predicted step (``whatif.predicted_tables``) above the measured step(s), on one
    time axis, with the timeline's lanes and phase colours."""
    return timeline_figure([predicted, *measured], title=WHATIF_TITLE)


# --- units ----------------------------------------------------------------------------------
