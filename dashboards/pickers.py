"""The page's pickers, shared by the layout and the views that add controls: a labelled
control, the run picker's options and labels."""

from __future__ import annotations

from typing import Any

from dash import html

from dashboards.data import RunRegistry, RunSource

HIDDEN = {"display": "none"}
LABEL_STYLE = {"fontWeight": "bold", "fontSize": "13px"}


def picker(label: str, component: Any, min_width: str = "220px") -> html.Div:
    """``component`` under a bold ``label``, in a flex row's cell."""
    return html.Div(
        [html.Label(label, style=LABEL_STYLE), component],
        style={"flex": "1", "minWidth": min_width},
    )


def picker_label(s: RunSource) -> str:
    """The run's name, and its configuration where the name does not say it."""
    config = s.config or "traces"
    return s.label if s.label == config else f"{s.label} ({config})"


def run_options(registry: RunRegistry) -> list[dict[str, str]]:
    return [{"label": picker_label(s), "value": s.key} for s in registry.sources]
