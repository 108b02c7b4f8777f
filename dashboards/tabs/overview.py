"""The overview tab: every run's per-rank means, its warnings and its findings."""

from __future__ import annotations

import pandas as pd
from dash import html
from dash.development.base_component import Component

from dashboards import ids
from dashboards.components import html_table, warning_panel
from dashboards.data import RunRegistry
from dashboards.tables import OVERVIEW_COLUMNS, OVERVIEW_HEADERS, findings_table, overview_table
from dashboards.tabs.base import Request, View, load_many
from overlapscope.analysis.findings.registry import no_findings_sentence


def overview_html(table: pd.DataFrame) -> html.Table:
    return html_table(table, OVERVIEW_COLUMNS, OVERVIEW_HEADERS, ids.OVERVIEW_TABLE)


def overview_view(registry: RunRegistry) -> list[Component]:
    runs, errors = load_many(registry, [s.key for s in registry.sources])
    warned = [
        warning_panel(r.source.label, r.analysis.warnings) for r in runs if r.analysis.warnings
    ]
    return [
        html.H3("Runs and ranks (per-step means over the profiled steps)"),
        *errors,
        *warned,
        overview_html(overview_table(runs)),
        html.H3("Findings (largest time at stake first)"),
        html.Div(_findings(findings_table(runs)), id=ids.FINDINGS),
    ]


def _findings(findings: pd.DataFrame) -> list[Component]:
    if findings.empty:
        return [html.P(no_findings_sentence().capitalize() + ".")]
    cards: list[Component] = []
    for run, rows in findings.groupby("run", sort=False):
        items = [
            html.Li(
                [
                    html.Strong(
                        f"{r.title}"
                        + (
                            f" (rank {int(r.rank)})"
                            if pd.notna(r.rank) and f"rank {int(r.rank)}" not in r.title
                            else ""
                        )
                        + f": {r.stake_ms:.1f} ms/step at stake"
                    ),
                    *([html.Div(r.where)] if r.where else []),
                    html.Div(f"evidence: {r.evidence}"),
                    *(html.Div(f"· {item}", style={"marginLeft": "12px"}) for item in r.items),
                    *(html.Div(f"try: {lv}", style={"color": "#1f5f1f"}) for lv in r.levers),
                ],
                className="finding",
                style={"marginBottom": "6px"},
            )
            for r in rows.itertuples(index=False)
        ]
        cards.append(html.Div([html.H4(str(run)), html.Ol(items)]))
    return cards


def _render(request: Request) -> list[Component]:
    return overview_view(request.registry)


VIEW = View(key=ids.TAB_OVERVIEW, label="Overview", render=_render)
