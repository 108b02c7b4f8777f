"""The timeline's cross-rank layers: raw vs aligned clocks, and the step's critical path.

The analysis works on aligned clocks (``overlapscope/analysis/clocks/alignment.py``); the raw view
puts
each rank's bars back on its own clock (``t + offset(t)``), so the two can be compared. The
critical path (``overlapscope/analysis/critical_path/path.py``) is drawn as one line over the
lanes of the ranks it runs through, with a vertical hop where it moves to another rank.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboards import palette
from dashboards.figures import lane_label
from overlapscope.analysis.api import RunAnalysis
from overlapscope.analysis.clocks.alignment import offset_at

PATH_NAME = "critical path"
PATH_COLOUR = "#111111"
GAP = "gap_before"  # a link whose previous one is not drawn (dashboards/big_run.py)


class ClockMode(enum.Enum):
    ALIGNED = "aligned"
    RAW = "raw"


def clock_mode(value: object) -> ClockMode:
    """The toggle's value; anything unknown is the default (aligned)."""
    return ClockMode.RAW if value == ClockMode.RAW.value else ClockMode.ALIGNED


def raw_tables(a: RunAnalysis) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(timeline, exposed) on each rank's recorded clock (unchanged when not aligned)."""
    if a.clocks is None or not a.clocks_applied:
        return a.timeline, a.exposed

    def back(df: pd.DataFrame) -> pd.DataFrame:
        if df.empty:
            return df
        shift = offset_at(a.clocks, df["rank"].to_numpy(), df["start_us"].to_numpy())
        return df.assign(start_us=df["start_us"] + shift, end_us=df["end_us"] + shift)

    return back(a.timeline), back(a.exposed)


def raw_links(a: RunAnalysis, links: pd.DataFrame) -> pd.DataFrame:
    if a.clocks is None or not a.clocks_applied or links.empty:
        return links
    shift = offset_at(a.clocks, links["rank"].to_numpy(), links["start_us"].to_numpy())
    return links.assign(start_us=links["start_us"] + shift, end_us=links["end_us"] + shift)


def step_links(a: RunAnalysis, step: int, mode: ClockMode) -> pd.DataFrame:
    """The path of ``step``, latest link first, on the chosen clocks."""
    if a.path is None or a.path.links.empty:
        return pd.DataFrame()
    links = a.path.links[a.path.links["step"] == step]
    return raw_links(a, links) if mode is ClockMode.RAW else links


def path_trace(links: pd.DataFrame, origin_us: float) -> go.Scatter:
    """One line through the links (ms since ``origin_us``): horizontal on the lane of the
    link's rank (exposed comm for transfers, compute otherwise), vertical at each hop."""
    lanes = np.where(links["kind"] == "comm", palette.LANE_EXPOSED, palette.LANE_COMPUTE)
    y = [lane_label(int(r), str(lane)) for r, lane in zip(links["rank"], lanes, strict=True)]
    t1 = (links["end_us"].to_numpy() - origin_us) / 1e3
    t0 = (links["start_us"].to_numpy() - origin_us) / 1e3
    xs = np.column_stack([t1, t0]).ravel()
    ys = np.repeat(np.asarray(y, dtype=object), 2)
    text = [_link_text(link) for link in links.to_dict("records")]
    texts = np.repeat(np.asarray(text, dtype=object), 2)
    if GAP in links:  # links of the ranks shown only: break the line where it left them
        at = 2 * np.flatnonzero(links[GAP].to_numpy(dtype=bool))
        none = np.full(len(at), None, dtype=object)
        xs, ys, texts = np.insert(xs, at, np.nan), np.insert(ys, at, none), np.insert(texts, at, "")
    return go.Scatter(
        x=xs,
        y=ys,
        mode="lines",
        name=PATH_NAME,
        line={"color": PATH_COLOUR, "width": 3},
        text=texts,
        hovertemplate="%{text}<extra>critical path</extra>",
    )


def _link_text(link: dict[str, Any]) -> str:
    """A link's hover: kind, rank, unit, length; a host link (the GPU waiting for the thread
    that launches its next op) what the thread was doing and the op it launched late."""
    unit = link["unit"] if isinstance(link["unit"], str) else "-"
    text = f"{link['kind']} · rank {link['rank']} · {unit} · {float(link['dur_us']):,.0f} µs"
    if link["kind"] == "host":
        doing = [str(link[c]) for c in ("host_activity", "host_op") if isinstance(link.get(c), str)]
        text += f" · host: {': '.join(doing) or '?'}"
        if isinstance(link.get("late_op"), str):
            text += f" · then launched {str(link['late_op'])[:60]}"
    return text


def panel_path(a: RunAnalysis, timeline: pd.DataFrame, mode: ClockMode) -> pd.DataFrame:
    """The path of the step a timeline panel shows (empty when it shows none)."""
    steps = timeline["step"].unique() if "step" in timeline else []
    return step_links(a, int(steps[0]), mode) if len(steps) == 1 else pd.DataFrame()


def add_paths(fig: go.Figure, rows: list[tuple[int, pd.DataFrame, float]]) -> go.Figure:
    """Draw each panel's path: ``(row, links, origin_us)`` per timeline panel."""
    for row, links, origin in rows:
        if links.empty:
            continue
        fig.add_trace(path_trace(links, origin), row=row, col=1)
    return fig
