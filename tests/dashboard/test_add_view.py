"""Adding a view as a user would: one ``View`` registered in ``tabs.VIEWS`` is a tab of the
page, the view callback's answer for that tab, and its own callbacks and value checks are
wired in the app (docs/DASHBOARD.md, "Adding a view"). Nothing else is edited: its ids live
here, not in dashboards/ids.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from dash import Dash, Input, Output, dcc, html

from dashboards import create_app, ids, tabs
from dashboards.data import RunRegistry, RunSource, default_pair
from dashboards.tabs import Request, View, register_view

from .test_app import _post, _view_request

HELLO = "hello"  # the tab's value
HELLO_TEXT = "hello-text"
HELLO_NAME = "hello-name"
HELLO_ECHO = "hello-echo"


def _render(request: Request) -> list[Any]:
    runs, errors = request.load(request.selected())
    names = ", ".join(r.source.label for r in runs)
    return [
        *errors,
        html.P(f"hello {names} at step {request.step}", id=HELLO_TEXT),
        dcc.Input(id=HELLO_NAME, value="world"),
        html.Div(id=HELLO_ECHO),
    ]


def _register(app: Dash, registry: RunRegistry) -> None:
    @app.callback(Output(HELLO_ECHO, "children"), Input(HELLO_NAME, "value"))
    def _echo(name: Any) -> str:
        return f"echo {name}"


def _is_name(v: object) -> bool:
    return v is None or (isinstance(v, str) and len(v) <= 20)


HELLO_VIEW = View(
    key=HELLO,
    label="Hello",
    render=_render,
    register=_register,
    checks={(HELLO_NAME, "value"): _is_name},
)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[Request]:
    """``HELLO_VIEW`` registered for this test only; the requests its render was given."""
    seen: list[Request] = []

    def render(request: Request) -> list[Any]:
        seen.append(request)
        return _render(request)

    monkeypatch.setattr(tabs, "VIEWS", list(tabs.VIEWS))
    register_view(View(**{**_fields(HELLO_VIEW), "render": render}))
    return seen


def _fields(view: View) -> dict[str, Any]:
    return {f: getattr(view, f) for f in View.__slots__}


def _tabs_of(layout: Any) -> list[dict[str, Any]]:
    """The ``dcc.Tabs`` children's props in the served page."""
    if isinstance(layout, dict):
        if layout.get("props", {}).get("id") == ids.TABS:
            return [t["props"] for t in layout["props"]["children"]]
        return [t for v in layout.values() for t in _tabs_of(v)]
    if isinstance(layout, list):
        return [t for v in layout for t in _tabs_of(v)]
    return []


def test_a_registered_view_is_the_last_tab(calls: list[Request], sample_runs: list[RunSource]):
    app = create_app(sample_runs)
    layout = json.loads(app.server.test_client().get("/_dash-layout").get_data(as_text=True))
    shown = _tabs_of(layout)
    assert [t["value"] for t in shown] == [*tabs.tab_keys()]
    assert {k: shown[-1][k] for k in ("label", "value", "id")} == {
        "label": "Hello",
        "value": HELLO,
        "id": f"tab-{HELLO}",
    }
    assert shown[0]["value"] == ids.TAB_OVERVIEW  # the others keep their order


def test_the_view_callback_renders_it(calls: list[Request], sample_runs: list[RunSource]):
    app = create_app(sample_runs)
    client = app.server.test_client()
    run_a, run_b = default_pair(sample_runs)
    assert run_a is not None and run_b is not None
    text = _post(client, _view_request(HELLO, run_a, run_b, 2))
    labels = {r.key: r.label for r in sample_runs}
    assert f"hello {labels[run_a]}, {labels[run_b]} at step 2" in text and HELLO_TEXT in text
    (request,) = calls
    assert (request.run_a, request.run_b, request.step, request.clocks, request.ranks) == (
        run_a,
        run_b,
        2,
        "aligned",
        [],
    )
    # a run key the app did not offer never reaches it
    assert (
        client.post("/_dash-update-component", json=_view_request(HELLO, "../x")).status_code == 400
    )
    assert len(calls) == 1


def test_its_own_callback_is_wired_and_its_values_checked(
    calls: list[Request], sample_runs: list[RunSource]
):
    app = create_app(sample_runs)
    client = app.server.test_client()
    body = {
        "output": f"{HELLO_ECHO}.children",
        "outputs": {"id": HELLO_ECHO, "property": "children"},
        "inputs": [{"id": HELLO_NAME, "property": "value", "value": "you"}],
        "changedPropIds": [f"{HELLO_NAME}.value"],
    }
    assert "echo you" in _post(client, body)
    body["inputs"] = [{"id": HELLO_NAME, "property": "value", "value": "x" * 21}]
    assert client.post("/_dash-update-component", json=body).status_code == 400


def test_a_view_without_the_registry_line_is_no_tab(sample_runs: list[RunSource]) -> None:
    app = create_app(sample_runs)
    resp = app.server.test_client().post(
        "/_dash-update-component", json=_view_request(HELLO, default_pair(sample_runs)[0])
    )
    assert resp.status_code == 400 and b"view-tabs.value" in resp.data
    assert HELLO not in tabs.tab_keys()


def test_a_key_is_registered_once_and_must_be_a_plain_name(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tabs, "VIEWS", list(tabs.VIEWS))
    with pytest.raises(ValueError, match="already registered"):
        register_view(View(key=ids.TAB_UNITS, label="Units again", render=_render))
    with pytest.raises(ValueError, match=r"View\.key 'Hello World'"):
        View(key="Hello World", label="Hello", render=_render)


@pytest.mark.browser
def test_its_tab_opens_in_the_browser(
    calls: list[Request], dash_duo: Any, sample_runs: list[RunSource]
) -> None:
    dash_duo.start_server(create_app(sample_runs))
    dash_duo.wait_for_element(f"#{ids.OVERVIEW_TABLE} td", timeout=20)  # the first tab's
    dash_duo.find_element(f"#tab-{HELLO}").click()
    dash_duo.wait_for_contains_text(f"#{HELLO_TEXT}", "hello", timeout=20)
    dash_duo.wait_for_text_to_equal(f"#{HELLO_ECHO}", "echo world", timeout=20)
    assert dash_duo.get_logs() == []
