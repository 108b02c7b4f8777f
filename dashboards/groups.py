"""The ranks tab's process-group filter: in a job of several process groups (HSDP, FSDP +
tensor parallel), the collectives of one group, among its own ranks, and the dimension each
group serves (``overlapscope/trace/groups/dimensions.py``)."""

from __future__ import annotations

import pandas as pd
from dash import dcc, html
from dash.development.base_component import Component

from dashboards import ids
from overlapscope.trace.groups.dimensions import group_dimensions

EVERY = "every group"
_LABEL = {"fontWeight": "bold", "fontSize": "13px"}  # (as the pickers' labels, layout.py)


def group_options(collectives: pd.DataFrame) -> list[dict[str, str]]:
    """``{label, value}`` per group of the collectives (``mesh_replicate[0,2] ·
    hsdp_replicate``), after the option for every group."""
    groups = collectives["group"].astype(object).to_numpy()
    dims = group_dimensions(groups, collectives["kind"].astype(object).to_numpy())
    shown = [{"label": f"{g} · {dims[g]}", "value": g} for g in sorted(dims)]
    return [{"label": EVERY, "value": EVERY}, *shown]


def group_picker(collectives: pd.DataFrame) -> Component | None:
    """The filter, where the run's collectives are of more than one group; None otherwise."""
    if collectives.empty or collectives["group"].nunique() < 2:
        return None
    dropdown = dcc.Dropdown(
        id=ids.GROUP, options=group_options(collectives), value=EVERY, clearable=False
    )
    label = html.Label("Process group (collectives below)", style=_LABEL)
    return html.Div([label, dropdown], style={"maxWidth": "480px"})


def of_group(
    collectives: pd.DataFrame, collective_ranks: pd.DataFrame, group: str | None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The collectives of ``group`` and their ranks' rows (every group: all of them)."""
    if group is None or group == EVERY:
        return collectives, collective_ranks
    return (
        collectives[collectives["group"].astype(object) == group],
        collective_ranks[collective_ranks["group"].astype(object) == group],
    )
