"""The dashboard never answers 500 (issue #32, point 4), on its live server in headless
Chromium: the page's own callbacks (a real zoom included) pass the guard, while requests that
do not fit the callback they name, sent over HTTP from the page, are answered 400 with one
log line and no traceback, and the page keeps working."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from dashboards import create_app, ids
from dashboards.data import RunSource
from tests.reliability.helpers import callback_request, good_values

pytestmark = pytest.mark.browser

_FETCH = """
const [bodies, done] = [arguments[0], arguments[arguments.length - 1]];
Promise.all(bodies.map(b => fetch('/_dash-update-component', {method: 'POST',
    headers: {'Content-Type': 'application/json'}, body: b}).then(r => r.status)))
  .then(done);
"""


def _bad_bodies(app: Any) -> list[str]:
    good = good_values(app)
    zoom = f"{ids.TIMELINE_GRAPH}.figure"
    view = f"{ids.VIEW}.children"
    fewer = callback_request(app, view, good)
    fewer["inputs"] = fewer["inputs"][:2]
    zkey, run = (ids.TIMELINE_GRAPH, "relayoutData"), (ids.RUN_A, "value")
    bodies = [
        fewer,
        callback_request(app, zoom, {**good, zkey: {"xaxis.range": [[0, 1], [2, 3]]}}),
        callback_request(app, zoom, {**good, zkey: {"xaxis.range": ["0", "5"]}}),
        callback_request(app, view, {**good, run: ["a", "list"]}),
        callback_request(app, view, {**good, run: "/etc/passwd"}),
        {**callback_request(app, zoom, good), "state": []},
    ]
    return [json.dumps(b) for b in bodies]


def test_misfit_requests_to_the_live_server_are_400_and_the_page_keeps_working(
    dash_duo: Any, sample_runs: list[RunSource], caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(sample_runs)
    caplog.set_level(logging.INFO)
    dash_duo.start_server(app)
    dash_duo.find_element(f"#tab-{ids.TAB_TIMELINE}").click()
    dash_duo.wait_for_element(f"#{ids.TIMELINE_GRAPH} .main-svg", timeout=30)
    # a real zoom: Plotly's relayoutData through the guard to the callback
    dash_duo.driver.execute_script(
        "Plotly.relayout(document.querySelector('#' + arguments[0] + ' .js-plotly-plot'),"
        " {'xaxis.range': [1, 40]})",
        ids.TIMELINE_GRAPH,
    )
    bad = _bad_bodies(app)
    statuses = dash_duo.driver.execute_async_script(_FETCH, bad)
    assert statuses == [400] * len(bad)
    dash_duo.find_element(f"#tab-{ids.TAB_OVERVIEW}").click()  # the page still answers
    dash_duo.wait_for_element(f"#{ids.OVERVIEW_TABLE} td", timeout=30)
    server = [r for r in caplog.records if r.name != "selenium.webdriver.remote.remote_connection"]
    assert not [r for r in server if r.levelno >= logging.ERROR or r.exc_info]
    refused = [r for r in server if "bad callback request" in r.getMessage()]
    assert len(refused) == len(bad)
    assert not [e for e in dash_duo.get_logs() or [] if "500" in str(e.get("message", ""))]
