"""The app and the ``overlapscope dashboard`` command: callbacks over HTTP, security points,
the CLI as a real server process."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from dashboards import create_app, ids, tabs, views
from dashboards.app import registry_of
from dashboards.data import RunSource, default_pair
from dashboards.tabs.timeline import parse_window
from dashboards.tabs.whatif import WHATIF_CONTROLS, WHATIF_DEFAULTS
from overlapscope.commands.dashboard import default_roots

from ..conftest import REPO, free_port


def _view_request(tab: str, run_a: Any, run_b: Any = None, step: Any = None) -> dict[str, Any]:
    inputs = [
        {"id": ids.TABS, "property": "value", "value": tab},
        {"id": ids.RUN_A, "property": "value", "value": run_a},
        {"id": ids.RUN_B, "property": "value", "value": run_b},
        {"id": ids.STEP, "property": "value", "value": step},
        {"id": ids.CLOCKS, "property": "value", "value": "aligned"},
        {"id": ids.RANKS, "property": "value", "value": []},  # runs opened with --dask only
    ]
    return {
        "output": f"{ids.VIEW}.children",
        "outputs": {"id": ids.VIEW, "property": "children"},
        "inputs": inputs,
        "changedPropIds": [f"{ids.RUN_A}.value"],
    }


def _post(client: Any, body: dict[str, Any]) -> str:
    resp = client.post("/_dash-update-component", json=body)
    assert resp.status_code == 200, resp.data[:300]
    return str(resp.get_data(as_text=True))


@pytest.mark.parametrize("key", ["/etc/passwd", "../none", "none/run.json", 42])
def test_a_run_key_from_the_client_that_was_not_offered_is_refused(
    sample_runs: list[RunSource], key: Any
) -> None:
    """Over HTTP the guard refuses it (400, dashboards/values.py) before any callback runs;
    a view given it anyway shows an error panel, reading nothing from the path."""
    app = create_app(sample_runs)
    client = app.server.test_client()
    for tab in tabs.tab_keys():
        resp = client.post("/_dash-update-component", json=_view_request(tab, key))
        assert resp.status_code == 400 and b"run-a.value" in resp.data
        text = str(views.render_view(registry_of(app), tab, key, None, None))
        assert "unknown run" in text and "error-panel" in text
        assert "root:" not in text  # nothing read from the path


def test_the_page_offers_only_run_keys(sample_runs: list[RunSource]) -> None:
    app = create_app(sample_runs)
    layout = json.loads(app.server.test_client().get("/_dash-layout").get_data(as_text=True))
    text = json.dumps(layout)
    values = set(re.findall(r'"value": "([^"]+)"', text))
    assert {r.key for r in sample_runs} <= values
    assert not any(str(r.path) in text for r in sample_runs)


def test_the_view_callback_renders_over_http(sample_runs: list[RunSource]) -> None:
    app = create_app(sample_runs)
    client = app.server.test_client()
    run_a, run_b = default_pair(sample_runs)
    text = _post(client, _view_request(ids.TAB_TIMELINE, run_a, run_b, 2))
    assert ids.TIMELINE_GRAPH in text and "exposed communication" in text
    assert "error-panel" not in text


def _whatif_request(
    tab: str, run_a: Any, target: Any, *controls: Any, step: Any = None
) -> dict[str, Any]:
    names = [ids.TABS, ids.RUN_A, ids.STEP, ids.WHATIF_TARGET, *WHATIF_CONTROLS]
    values = [tab, run_a, step, target, *controls]
    return {
        "output": f"{ids.WHATIF_OUTPUT}.children",
        "outputs": {"id": ids.WHATIF_OUTPUT, "property": "children"},
        "inputs": [
            {"id": n, "property": "value", "value": v} for n, v in zip(names, values, strict=True)
        ],
        "changedPropIds": [f"{ids.WHATIF_POLICY}.value"],
    }


def test_the_whatif_callback_predicts_over_http(sample_runs: list[RunSource]) -> None:
    app = create_app(sample_runs)
    client = app.server.test_client()
    run_a, run_b = default_pair(sample_runs)
    text = _post(client, _whatif_request(ids.TAB_WHATIF, run_a, run_b, *WHATIF_DEFAULTS))
    assert ids.WHATIF_TABLE in text and ids.WHATIF_GRAPH in text
    assert "prediction error (%)" in text and "error-panel" not in text
    # A non-positive network: one line in the panel, not a server error.
    bad = (*WHATIF_DEFAULTS[:-1], -2)
    text = _post(client, _whatif_request(ids.TAB_WHATIF, run_a, None, *bad))
    assert "error-panel" in text and "bandwidth scale must be a number" in text
    assert "Traceback" not in text
    # Other tabs never compute a prediction: nothing to update.
    idle = _post(client, _whatif_request(ids.TAB_OVERVIEW, run_a, run_b, *WHATIF_DEFAULTS))
    assert json.loads(idle)["response"] == {}


def test_the_whatif_target_follows_the_scenario_over_http(sweep_runs: list[RunSource]) -> None:
    app = create_app(sweep_runs)
    client = app.server.test_client()
    run_a, run_b = default_pair(sweep_runs)
    names = [ids.RUN_A, ids.RUN_B, *WHATIF_CONTROLS]
    limited = (WHATIF_DEFAULTS[0], [], 2, *WHATIF_DEFAULTS[3:])
    body = {
        "output": f"{ids.WHATIF_TARGET}.value",
        "outputs": {"id": ids.WHATIF_TARGET, "property": "value"},
        "inputs": [
            {"id": n, "property": "value", "value": v}
            for n, v in zip(names, [run_a, run_b, *limited], strict=True)
        ],
        "changedPropIds": [f"{ids.WHATIF_LIMIT}.value"],
    }
    doc = json.loads(_post(client, body))
    target = doc["response"][ids.WHATIF_TARGET]["value"]
    manifest = json.loads((registry_of(app).source(target).path / "run.json").read_text())
    engine = manifest["config"]["engine"]
    assert (engine["policy"], engine["limit_all_gathers"]) == ("backward_pre", 2)


@pytest.mark.parametrize(
    ("relayout", "expected"),
    [
        ({"xaxis.range[0]": 1.0, "xaxis.range[1]": 5.0}, (1.0, 5.0)),
        ({"xaxis2.range[0]": 2, "xaxis2.range[1]": 3}, (2.0, 3.0)),
        ({"xaxis.range": [4, 6]}, (4.0, 6.0)),
        ({"xaxis.autorange": True}, "auto"),
        ({"autosize": True}, None),
        ({"yaxis.range[0]": 0, "yaxis.range[1]": 1}, None),
        (None, None),
    ],
    ids=["zoom", "zoom-lower-panel", "range-list", "reset", "resize", "y-only", "none"],
)
def test_parse_window(relayout: Any, expected: Any) -> None:
    assert parse_window(relayout) == expected


def test_default_runs_are_the_shipped_sample_runs() -> None:
    (root,) = default_roots()
    assert root.resolve() == (REPO / "traces").resolve()


# How long a stopped dashboard may take to exit before the test calls it hung: generous, as
# under a loaded CI machine a --dask local dashboard once took over 30 s (a hang guard only).
EXIT_GUARD_S = 120


def _serve(*args: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``overlapscope dashboard``; return the process and the URL it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "overlapscope", "dashboard", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            raise AssertionError(f"dashboard exited with {proc.returncode}")
        m = re.search(r"(http://\S+/)", line)
        if m:
            return proc, m.group(1)
    proc.kill()
    raise AssertionError("no URL printed")


def _get(url: str) -> str:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return str(resp.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def _listen_addresses(port: int) -> set[str]:
    """Local addresses in LISTEN state on ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(addr)
    return found


def _dash_config(page: str) -> dict[str, Any]:
    m = re.search(r'<script id="_dash-config" type="application/json">(.*?)</script>', page, re.S)
    assert m, "no _dash-config in the page"
    return dict(json.loads(m.group(1)))


def test_cli_serves_on_localhost_only_without_debug() -> None:
    port = free_port()
    proc, url = _serve("--port", str(port))  # no RUN_DIR: the sample runs
    try:
        assert url == f"http://127.0.0.1:{port}/"
        page = _get(url)
        assert "overlapscope dashboard" in page
        assert _dash_config(page)["ui"] is False  # no dev tools: debug off
        assert _listen_addresses(port) == {"0100007F"}  # 127.0.0.1, nothing else
    finally:
        proc.terminate()
        proc.wait(timeout=EXIT_GUARD_S)


def test_cli_debug_is_opt_in() -> None:
    port = free_port()
    proc, url = _serve("traces/none", "--port", str(port), "--debug", "--no-warm")
    try:
        assert _dash_config(_get(url))["ui"] is True
    finally:
        proc.terminate()
        proc.wait(timeout=EXIT_GUARD_S)


def test_cli_refuses_a_missing_run_dir_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-run"
    res = subprocess.run(
        [sys.executable, "-m", "overlapscope", "dashboard", str(missing)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2
    assert res.stderr == f"overlapscope: error: {missing}: no such run directory\n"
    assert res.stdout == ""


def test_cli_refuses_inputs_none_of_which_loads_in_one_line(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"a": 1}')
    res = subprocess.run(
        [sys.executable, "-m", "overlapscope", "dashboard", str(foreign), "--port", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "no run could be loaded" in lines[0] and "foreign.json" in lines[0]
    assert res.stdout == ""


def test_cli_refuses_a_port_in_use_in_one_line_before_any_work() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = subprocess.run(
            [sys.executable, "-m", "overlapscope", "dashboard", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert res.returncode == 2, res.stderr
    assert res.stderr == (
        f"overlapscope: error: --port {port}: cannot serve on 127.0.0.1:{port} "
        "(Address already in use); pick another --port\n"
    )
    assert res.stdout == ""
