"""Building blocks shared by the views: error panels, plain HTML tables, a run's timeline panel.

Used by :mod:`dashboards.views` and :mod:`dashboards.whatif_view`; plain functions of tables
and runs to Dash components.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
from dash import dcc, html

from dashboards import ids
from dashboards.big_run import chosen_step
from dashboards.critical_path import ClockMode, raw_tables
from dashboards.data import LoadedRun
from dashboards.figures import TimelinePanel, step_panel
from overlapscope.errors import UserError

ERROR_STYLE = {
    "border": "1px solid #d62728",
    "background": "#fdecea",
    "color": "#611a15",
    "padding": "10px 14px",
    "borderRadius": "6px",
    "margin": "8px 0",
}
WARNING_STYLE = {**ERROR_STYLE, "border": "1px solid #ff7f0e", "background": "#fff4e5",
                 "color": "#663c00"}  # fmt: skip
GRAPH_CONFIG: dcc.Graph.Config = {"displaylogo": False, "scrollZoom": True}


def error_panel(message: str, title: str = "Cannot show this run: ") -> html.Div:
    return html.Div(
        [html.Strong(title), html.Span(message)],
        className=ids.ERROR_PANEL_CLASS,
        style=ERROR_STYLE,
    )


def warning_panel(label: str, warnings: Sequence[str]) -> html.Div:
    """The loader's warnings about a run (what it left out), as ``analyze`` prints them."""
    return html.Div(
        [
            html.Strong(f"{label}: {len(warnings)} warning{'s' if len(warnings) != 1 else ''}"),
            html.Ul([html.Li(w) for w in warnings]),
        ],
        className=ids.WARNING_PANEL_CLASS,
        style=WARNING_STYLE,
    )


NUMBER_FORMATS: dict[str, str] = {
    "step_ms": "{:.1f}",
    "throughput_tok_s": "{:,.0f}",
    "exposed_comm_per_step_ms": "{:.1f}",
    "nccl_wait_per_step_ms": "{:.1f}",
    "overlap_pct": "{:.1f}",
    "peak_mem_mib": "{:.1f}",
    "busbw_gbit_s": "{:.3f}",
    "measured_source": "{:,.1f}",
    "predicted": "{:,.1f}",
    "measured_target": "{:,.1f}",
    "change_pct": "{:+.1f}",
    "error_pct": "{:+.1f}",
    **{c: "{:.3f}" for c in ("exposed_ms", "host_late_ms", "peer_wait_ms", "transfer_ms")},
    "idle_ms": "{:.3f}",
}
CELL_STYLE = {"padding": "4px 10px", "borderBottom": "1px solid #e5e5e5", "textAlign": "right"}
HEAD_STYLE = CELL_STYLE | {"background": "#f3f3f3", "fontWeight": "bold", "verticalAlign": "bottom"}

TEXT_ALIGN: dict[str, dict[str, str]] = {
    "run": {"textAlign": "left"},
    "policy": {"textAlign": "left"},
    "metric": {"textAlign": "left"},
    "unit": {"textAlign": "left"},
    "host_op": {"textAlign": "left"},
    "host_activity": {"textAlign": "left"},
}


def format_cell(column: str, value: object) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    fmt = NUMBER_FORMATS.get(column)
    return fmt.format(value) if fmt and isinstance(value, int | float) else str(value)


def html_table(
    rows: pd.DataFrame, columns: Sequence[str], headers: Mapping[str, str], table_id: str
) -> html.Table:
    """A plain table of ``rows[columns]``, headed by ``headers``, cells by ``format_cell``."""
    head = html.Tr([html.Th(headers[c], style=HEAD_STYLE | TEXT_ALIGN.get(c, {})) for c in columns])
    body = [
        html.Tr(
            [
                html.Td(format_cell(c, row[c]), style=CELL_STYLE | TEXT_ALIGN.get(c, {}))
                for c in columns
            ]
        )
        for row in rows.to_dict("records")
    ]
    return html.Table(
        [html.Thead(head), html.Tbody(body)],
        id=table_id,
        style={"borderCollapse": "collapse", "fontSize": "14px", "width": "100%"},
    )


def run_panel(
    run: LoadedRun, step: int | None, prefix: str = "", mode: ClockMode = ClockMode.ALIGNED
) -> TimelinePanel:
    """The timeline panel of ``run``'s ``step`` (its first profiled step when ``step`` is not
    one), titled by run, policy and step; ``mode`` picks aligned or raw clocks."""
    a = run.analysis
    try:
        chosen = chosen_step(a, step)
    except UserError as e:
        raise UserError(f"{run.source.label}: {e}") from None
    note = "" if chosen == step or step is None else f" (step {step} not profiled)"
    title = f"{prefix}{run.source.label} · policy {run.source.policy or '?'} · step {chosen}{note}"
    timeline, exposed = raw_tables(a) if mode is ClockMode.RAW else (a.timeline, a.exposed)
    title += " · raw clocks" if mode is ClockMode.RAW else ""
    return step_panel(title, timeline, exposed, a.steps, chosen)
