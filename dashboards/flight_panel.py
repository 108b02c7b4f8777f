"""The ranks tab's Flight Recorder panel: where a run carries dumps (``comm_traces/``,
overlapscope/flight/), their findings (hangs first, late issuers, peer waits), the clocks'
rule and the join to the trace's units, in a few lines."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from dash import html
from dash.development.base_component import Component

from overlapscope.errors import UserError
from overlapscope.flight.api import FlightReport, analyze_dumps
from overlapscope.flight.discover import find_dumps

FLIGHT = "flight"  # the panel's id
_CACHE: dict[tuple[str, tuple[tuple[str, int], ...]], FlightReport] = {}


def _report(run_dir: Path, trace_collectives: pd.DataFrame | None) -> FlightReport | None:
    """The run's flight report, kept while its dumps are unchanged; None without dumps."""
    dumps, _ = find_dumps([run_dir])
    if not dumps:
        return None
    key = (str(run_dir), tuple((str(p), p.stat().st_mtime_ns) for p in dumps))
    if key not in _CACHE:
        _CACHE.clear()  # one run's report at a time: dumps of many ranks are large
        _CACHE[key] = analyze_dumps(dumps, trace_collectives=trace_collectives)
    return _CACHE[key]


def flight_panel(run_dir: Path, trace_collectives: pd.DataFrame | None) -> list[Component]:
    """The panel (nothing where the run has no dumps; its one-line error where they are
    refused)."""
    try:
        r = _report(run_dir, trace_collectives)
    except UserError as e:
        return [html.Div([html.H4("Flight Recorder"), html.P(str(e))], id=FLIGHT)]
    if r is None:
        return []
    c = r.collectives
    head = (
        f"{len(r.dumps)} dump(s), {len(r.entries):,} entries, {len(c):,} collectives; "
        f"{r.clocks.note}; {r.join_note}"
    )
    items = [
        html.Li(
            [
                html.B(f.title),
                f": {f.summary}",
                html.Br(),
                html.I("try: " + "; ".join(lv.lever for lv in f.levers)),
            ]
        )
        for f in r.findings
    ]
    return [
        html.Div(
            [
                html.H4("Flight Recorder: what every rank issued, from its dumps"),
                html.P(head),
                html.Ul(items or [html.Li("no hang, late issuer or peer wait")]),
                *[html.P(f"warning: {w}") for w in r.warnings],
            ],
            id=FLIGHT,
        )
    ]
