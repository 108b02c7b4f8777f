"""The dashboard answers malformed requests with 4xx and no traceback in its log, caps
request bodies, serves nothing outside its packages' assets, and ignores zoom values of the
wrong type (issue #21, point 6). The real Flask server of the app, through its test client."""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import pytest
from flask.testing import FlaskClient

from dashboards import create_app, discover_runs
from dashboards.guard import MAX_BODY_BYTES
from dashboards.zoom import x_window
from tests.reliability.helpers import SAMPLE_RUN


@pytest.fixture(scope="module")
def app() -> Any:
    return create_app(discover_runs([SAMPLE_RUN]), use_disk_cache=False)


@pytest.fixture
def client(app: Any) -> FlaskClient:
    c = app.server.test_client()
    assert c.get("/").status_code == 200  # Dash registers its assets on the first page
    return c


def _a_real_callback(app: Any) -> dict[str, Any]:
    output = next(iter(app.callback_map))
    return {"output": output, "outputs": {"id": "x", "property": "children"}, "inputs": []}


BAD_BODIES: dict[str, object] = {
    "empty-object": {},
    "not-an-object": [1, 2],
    "inputs-not-a-list": "inputs",
    "unknown-output": "unknown",
    "state-not-a-list": "state",
    "changed-not-strings": "changed",
}


@pytest.mark.parametrize("case", list(BAD_BODIES), ids=list(BAD_BODIES))
def test_malformed_callback_is_400_without_traceback(
    case: str, app: Any, client: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    body = BAD_BODIES[case]
    good = _a_real_callback(app)
    if body == "inputs":
        body = {**good, "inputs": {"id": "a"}}
    elif body == "unknown":
        body = {**good, "output": "no-such.children"}
    elif body == "state":
        body = {**good, "state": "x"}
    elif body == "changed":
        body = {**good, "changedPropIds": [1]}
    with caplog.at_level(logging.DEBUG):
        resp = client.post("/_dash-update-component", json=body)
    assert resp.status_code == 400
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_not_json_is_400(client: FlaskClient) -> None:
    resp = client.post(
        "/_dash-update-component", data=b"{not json", content_type="application/json"
    )
    assert resp.status_code == 400


def test_body_beyond_the_cap_is_413(client: FlaskClient) -> None:
    big = b"x" * (MAX_BODY_BYTES + 1)
    resp = client.post("/_dash-update-component", data=big, content_type="application/json")
    assert resp.status_code == 413


def test_the_largest_layout_fits_the_cap(client: FlaskClient) -> None:
    layout = client.get("/_dash-layout")
    assert layout.status_code == 200
    # a callback carries at most the whole layout as state
    assert len(layout.data) < MAX_BODY_BYTES


@pytest.mark.parametrize(
    "path",
    [
        "/_dash-component-suites/os/__init__.py",
        "/_dash-component-suites/dash/../../etc/passwd",
        "/_dash-component-suites/dash/%2e%2e/dash.py",
        "/_dash-component-suites/dash/dash.py",
        "/_dash-component-suites/nosuchpackage/x.js",
    ],
)
def test_nothing_outside_the_registered_assets(
    path: str, client: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        resp = client.get(path)
    assert 400 <= resp.status_code < 500
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_registered_assets_are_served(app: Any, client: FlaskClient) -> None:
    package, paths = next((k, v) for k, v in app.registered_paths.items() if v)
    resp = client.get(f"/_dash-component-suites/{package}/{sorted(paths)[0]}")
    assert resp.status_code == 200


ZOOMS: dict[str, tuple[object, object]] = {
    "bounds": ({"xaxis.range[0]": 1, "xaxis.range[1]": 2.5}, (1.0, 2.5)),
    "list": ({"xaxis2.range": [0, 3]}, (0.0, 3.0)),
    "reset": ({"xaxis.autorange": True}, "auto"),
    "strings": ({"xaxis.range[0]": "a", "xaxis.range[1]": "b"}, None),
    "numeric-strings": ({"xaxis.range": ["1", "2"]}, None),
    "nulls": ({"xaxis.range[0]": None, "xaxis.range[1]": None}, None),
    "null-in-list": ({"xaxis.range": [None, 2]}, None),
    "bools": ({"xaxis.range": [False, True]}, None),
    "nan": ({"xaxis.range": [math.nan, 2]}, None),
    "reversed": ({"xaxis.range": [2, 1]}, None),
    "short-list": ({"xaxis.range": [1]}, None),
    "not-a-dict": ([1, 2], None),
    "none": (None, None),
    "unrelated": ({"yaxis.range": [0, 1]}, None),
}


@pytest.mark.parametrize("case", list(ZOOMS), ids=list(ZOOMS))
def test_zoom_values_of_the_wrong_type_are_ignored(case: str) -> None:
    relayout, expected = ZOOMS[case]
    assert x_window(relayout) == expected


def test_zoom_callback_with_string_ranges_answers(app: Any, client: FlaskClient) -> None:
    """The timeline zoom callback itself, given string and null ranges: no 500."""
    zoom = [k for k, v in app.callback_map.items() if any(
        i["property"] == "relayoutData" for i in v["inputs"])]  # fmt: skip
    if not zoom:
        pytest.skip("no callback reads relayoutData in this layout")
    spec = app.callback_map[zoom[0]]
    for value in ({"xaxis.range": ["a", None]}, {"xaxis.range[0]": None}):
        inputs = [
            {**i, "value": value if i["property"] == "relayoutData" else None}
            for i in spec["inputs"]
        ]
        body = {
            "output": zoom[0],
            "outputs": {"id": zoom[0].split(".")[0], "property": zoom[0].split(".")[-1]},
            "inputs": inputs,
            "state": [{**s, "value": None} for s in spec.get("state", [])],
            "changedPropIds": [f"{inputs[0]['id']}.{inputs[0]['property']}"],
        }
        resp = client.post("/_dash-update-component", data=json.dumps(body),
                           content_type="application/json")  # fmt: skip
        assert resp.status_code in (200, 204), resp.data[:300]
