"""The dashboard answers malformed requests with 4xx and no traceback in its log, caps
request bodies, serves nothing outside its packages' assets, and ignores zoom values of the
wrong type (issue #21, point 6). The real Flask server of the app, through its test client."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
from flask.testing import FlaskClient

from dashboards import create_app, discover_runs
from dashboards.guard import MAX_BODY_BYTES
from dashboards.values import value_checks
from dashboards.zoom import x_window
from tests.reliability.helpers import SAMPLE_RUN, callback_request, good_values, post


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


def test_every_callback_input_and_state_has_a_value_check(app: Any) -> None:
    checks = value_checks(["k"])
    for output, spec in app.callback_map.items():
        for d in [*spec["inputs"], *spec.get("state", [])]:
            assert (d["id"], d["property"]) in checks, (output, d)


def test_a_well_formed_request_to_every_callback_is_answered(app, client, caplog) -> None:
    good = good_values(app)
    assert set(good) == set(value_checks(["k"]))
    with caplog.at_level(logging.DEBUG):
        for output in app.callback_map:
            assert post(client, callback_request(app, output, good)) in (200, 204), output
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def _misfits(app: Any, output: str, good: dict[tuple[str, str], object]) -> dict[str, object]:
    """Requests for ``output`` that do not fit its declaration, by what is wrong."""
    body = callback_request(app, output, good)
    first = body["inputs"][0]
    wrong_out = {"id": "no-such", "property": "children"}
    cases: dict[str, object] = {
        "too-few-inputs": {**body, "inputs": body["inputs"][:-1]},
        "too-many-inputs": {**body, "inputs": [*body["inputs"], first]},
        "no-inputs": {**body, "inputs": []},
        "wrong-input-id": {**body, "inputs": [{**first, "id": "no-such"}, *body["inputs"][1:]]},
        "wrong-input-property": {**body, "inputs": [{**first, "property": "style"}, *body["inputs"][1:]]},
        "inputs-reordered": {**body, "inputs": body["inputs"][::-1]} if len(body["inputs"]) > 1 else None,
        "too-many-state": {**body, "state": [*body["state"], first]},
        "too-few-state": {**body, "state": body["state"][:-1]} if body["state"] else None,
        "wrong-outputs": {**body, "outputs": [wrong_out] if isinstance(body["outputs"], list) else wrong_out},
        "changed-not-an-input": {**body, "changedPropIds": ["no-such.value"]},
    }  # fmt: skip
    return {k: v for k, v in cases.items() if v is not None}


# Values of the wrong type for any property (a run key as a list or a path, a zoom range
# as lists or strings, ...): each one the property's check refuses is answered 400.
ODD_VALUES: list[object] = [
    ["a"], {"a": 1}, "/etc/passwd", "../traces/none", 1e308, True, -1, "", [[1], [2]],
    {"xaxis.range": [[1], [2]]}, {"xaxis.range": ["1", "2"]}, {"xaxis.range[0]": "a"},
    {"xaxis.range": [0]}, [1.5], ["on", "off"],
]  # fmt: skip


@pytest.mark.parametrize("what", ["fit", "values"])
def test_a_request_that_does_not_fit_its_callback_is_400_never_500(app, client, caplog, what):
    good = good_values(app)
    checks = value_checks([next(iter(app.server.config["OVERLAPSCOPE_REGISTRY"].sources)).key])
    sent = 0
    for output, spec in app.callback_map.items():
        if what == "fit":
            bodies = {k: (b, 400) for k, b in _misfits(app, output, good).items()}
        else:
            bodies = {}
            for d in [*spec["inputs"], *spec.get("state", [])]:
                key = (d["id"], d["property"])
                refused = [v for v in ODD_VALUES if not checks[key](v)]
                assert refused, key  # every property refuses some of them
                for v in ODD_VALUES:
                    expect = 400 if v in refused else 200
                    bodies[f"{key}={v!r}"] = (
                        callback_request(app, output, {**good, key: v}),
                        expect,
                    )
        for case, (body, expect) in bodies.items():
            caplog.clear()
            with caplog.at_level(logging.DEBUG):
                code = post(client, body)
            sent += 1
            assert code != 500 and (code == 400) == (expect == 400), (output, case, code)
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR], (output, case)
            if code == 400:
                lines = [r for r in caplog.records if r.levelno == logging.WARNING]
                assert len(lines) == 1 and "bad callback request" in lines[0].getMessage()
    assert sent > 50


def test_the_issues_requests_are_400(app: Any, client: FlaskClient) -> None:
    """The requests that once answered 500: fewer inputs than declared, a zoom range as a
    list of lists or of strings, a run key as a list or a path."""
    from dashboards import ids

    good = good_values(app)
    zoom = next(o for o, s in app.callback_map.items()
                if any(i["property"] == "relayoutData" for i in s["inputs"]))  # fmt: skip
    view = f"{ids.VIEW}.children"
    fewer = callback_request(app, view, good)
    fewer["inputs"] = fewer["inputs"][:2]
    zkey = (ids.TIMELINE_GRAPH, "relayoutData")
    for body in (
        fewer,
        callback_request(app, zoom, {**good, zkey: {"xaxis.range": [[0, 1], [2, 3]]}}),
        callback_request(app, zoom, {**good, zkey: {"xaxis.range": ["0", "5"]}}),
        callback_request(app, view, {**good, (ids.RUN_A, "value"): ["none"]}),
        callback_request(app, view, {**good, (ids.RUN_A, "value"): str(SAMPLE_RUN)}),
    ):
        assert post(client, body) == 400
