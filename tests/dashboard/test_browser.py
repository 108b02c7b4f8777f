"""Real-browser tests (headless Chromium via dash_duo) on the shipped sample runs.

They also write the screenshots in ``docs/dashboard-<view>.png`` shown in the README.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from dash.testing.wait import until
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from dashboards import create_app, ids, tabs, views
from dashboards.app import registry_of
from dashboards.data import RunSource, default_pair, discover_runs

from .conftest import DOCS

pytestmark = pytest.mark.browser

# The main graph of each view that draws one as it opens (the what-if tab's waits for its
# panel's prediction): timeline, units, trade-off, ranks.
GRAPH_OF = {v.key: v.graphs[0] for v in tabs.VIEWS if v.graphs and v.panel is None}


def _open_tab(dash_duo: Any, tab: str) -> None:
    dash_duo.find_element(f"#tab-{tab}").click()
    if tab in GRAPH_OF:
        dash_duo.wait_for_element(f"#{GRAPH_OF[tab]} .main-svg", timeout=20)
    else:
        dash_duo.wait_for_element(f"#{ids.OVERVIEW_TABLE} td", timeout=20)


def _text(dash_duo: Any, selector: str) -> str:
    return str(dash_duo.find_element(selector).text)


def _figure(dash_duo: Any, graph_id: str) -> dict[str, Any]:
    """The figure as plotly drew it (data and layout from the graph's DOM node)."""
    js = (
        "const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');"
        "return JSON.stringify({data: gd.data.map(t => ({name: t.name, type: t.type})),"
        " titles: (gd.layout.annotations || []).map(a => a.text), title: gd.layout.title.text});"
    )
    return dict(json.loads(dash_duo.driver.execute_script(js, graph_id)))


def _screenshot(dash_duo: Any, tab: str, bottom_of: str = ids.VIEW) -> None:
    # Tall enough for the whole page: headless Chromium captures the viewport only.
    bottom = dash_duo.driver.execute_script(
        "return document.getElementById(arguments[0]).getBoundingClientRect().bottom"
        " + window.scrollY",
        bottom_of,
    )
    dash_duo.driver.set_window_size(1400, min(int(bottom) + 200, 2400))
    time.sleep(0.6)  # plotly re-layouts on resize
    dash_duo.driver.save_screenshot(str(DOCS / f"dashboard-{tab}.png"))


def test_every_view_renders_the_sample_runs(dash_duo: Any, sample_runs: list[RunSource]) -> None:
    app = create_app(sample_runs)
    dash_duo.start_server(app)
    run_a, run_b = default_pair(sample_runs)
    labels = {r.key: r.label for r in sample_runs}

    _open_tab(dash_duo, ids.TAB_OVERVIEW)
    table = _text(dash_duo, f"#{ids.OVERVIEW_TABLE}")
    for r in sample_runs:
        assert r.label in table
    assert "exposed comm" in table and "peak memory" in table
    findings = _text(dash_duo, f"#{ids.FINDINGS}")
    assert "evidence:" in findings and "try:" in findings
    _screenshot(dash_duo, ids.TAB_OVERVIEW)

    _open_tab(dash_duo, ids.TAB_TIMELINE)
    fig = _figure(dash_duo, ids.TIMELINE_GRAPH)
    titles = " | ".join(fig["titles"])
    assert labels[str(run_a)] in titles and labels[str(run_b)] in titles
    names = {t["name"] for t in fig["data"]}
    assert {"forward", "exposed communication"} <= names
    assert any(n.endswith("all-gather") for n in names)
    _screenshot(dash_duo, ids.TAB_TIMELINE)

    _open_tab(dash_duo, ids.TAB_UNITS)
    fig = _figure(dash_duo, ids.UNITS_GRAPH)
    assert fig["title"] == "Exposed communication per unit"
    assert any("backward all-gather" in t["name"] for t in fig["data"])
    assert "waiting for the last rank" in _text(dash_duo, f"#{ids.UNITS_SPLIT}")
    _screenshot(dash_duo, ids.TAB_UNITS)

    _open_tab(dash_duo, ids.TAB_TRADEOFF)
    fig = _figure(dash_duo, ids.TRADEOFF_GRAPH)
    assert len(fig["data"]) == len(sample_runs)
    _screenshot(dash_duo, ids.TAB_TRADEOFF)

    _open_tab(dash_duo, ids.TAB_RANKS)
    fig = _figure(dash_duo, ids.RANKS_GRAPH)
    assert {t["type"] for t in fig["data"]} >= {"heatmap", "bar"}
    assert "started last" in _text(dash_duo, f"#{ids.STRAGGLERS}")
    waits = _figure(dash_duo, ids.WAITS_GRAPH)
    assert waits["title"].startswith("Where the GPU waits")
    assert {"idle: host-bound", "exposed comm: waiting for the last rank"} <= {
        t["name"] for t in waits["data"]
    }
    assert "no GPU idle caused by the host" in _text(dash_duo, f"#{ids.HOST_OPS}")  # CPU runs
    _screenshot(dash_duo, ids.TAB_RANKS)

    assert dash_duo.get_logs() == []


def _pick(dash_duo: Any, dropdown_id: str, option_text: str, timeout: float = 10.0) -> None:
    """Open a dropdown and click the option showing ``option_text``.

    The open menu is rendered in a portal, outside the dropdown's element, and
    its options get their text a moment after they appear: poll until the
    wanted one is there rather than reading the list once.
    """
    dash_duo.find_element(f"#{dropdown_id}").click()
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < deadline:
        seen = []
        try:
            for el in dash_duo.driver.find_elements(By.CSS_SELECTOR, "[role=option]"):
                seen.append(el.text)
                if el.text == option_text:
                    el.click()
                    return
        except StaleElementReferenceException:
            pass  # the menu re-rendered under us; read it again
        time.sleep(0.1)
    raise AssertionError(f"no option {option_text!r} in #{dropdown_id} after {timeout}s: {seen}")


def test_switching_runs_and_steps(dash_duo: Any, sample_runs: list[RunSource]) -> None:
    app = create_app(sample_runs)
    dash_duo.start_server(app)
    run_a, run_b = default_pair(sample_runs)
    steps = views.step_options(registry_of(app), run_a, run_b)
    assert len(steps) >= 2, "the sample runs should profile at least two steps"
    _open_tab(dash_duo, ids.TAB_TIMELINE)
    assert all(f"step {steps[0]}" in t for t in _figure(dash_duo, ids.TIMELINE_GRAPH)["titles"])

    # Another step: every timeline panel is redrawn for it.
    _pick(dash_duo, ids.STEP, f"step {steps[1]}")
    dash_duo.wait_for_contains_text(f"#{ids.TIMELINE_GRAPH}", f"step {steps[1]}", timeout=20)
    titles = _figure(dash_duo, ids.TIMELINE_GRAPH)["titles"]
    assert len(titles) == 2 and all(f"step {steps[1]}" in t for t in titles)

    # No run B: one panel.
    dash_duo.find_element(f"#{ids.RUN_B} .dash-dropdown-clear").click()
    until(lambda: len(_figure(dash_duo, ids.TIMELINE_GRAPH)["titles"]) == 1, timeout=20)

    # Another run A: the ranks view names it.
    other_run = next(r for r in sample_runs if r.key != run_a)
    _open_tab(dash_duo, ids.TAB_RANKS)
    _pick(dash_duo, ids.RUN_A, views.picker_label(other_run))
    dash_duo.wait_for_contains_text(f"#{ids.RANKS_GRAPH}", other_run.label, timeout=20)
    assert dash_duo.get_logs() == []


def test_vanished_and_broken_runs_show_an_error_panel(
    dash_duo: Any, sample_run_dir: Path, tmp_path: Path
) -> None:
    good = tmp_path / "good"
    broken = tmp_path / "broken"
    shutil.copytree(sample_run_dir, good)
    shutil.copytree(sample_run_dir, broken)
    for trace in broken.glob("*.json.gz"):
        trace.write_bytes(b"\x1f\x8b not really gzip")
    runs = discover_runs([tmp_path])
    app = create_app(runs)
    dash_duo.start_server(app)
    _open_tab(dash_duo, ids.TAB_OVERVIEW)  # the good run's rows, the broken one's panel
    dash_duo.wait_for_contains_text(f".{ids.ERROR_PANEL_CLASS}", "broken", timeout=20)
    assert "good" in _text(dash_duo, f"#{ids.OVERVIEW_TABLE}")

    shutil.rmtree(good)
    dash_duo.find_element(f"#tab-{ids.TAB_UNITS}").click()  # re-renders: both runs now fail
    dash_duo.wait_for_contains_text(f"#{ids.VIEW}", "no longer exists", timeout=20)
    assert len(dash_duo.find_elements(f".{ids.ERROR_PANEL_CLASS}")) == 2
    assert dash_duo.find_element(f"#{ids.TABS}")  # the app is still up
    assert dash_duo.get_logs() == []


def _whatif_table(dash_duo: Any) -> tuple[list[str], list[list[str]]]:
    table = dash_duo.find_element(f"#{ids.WHATIF_TABLE}")
    headers = [th.text for th in table.find_elements(By.CSS_SELECTOR, "th")]
    rows = [
        [td.text for td in tr.find_elements(By.CSS_SELECTOR, "td")]
        for tr in table.find_elements(By.CSS_SELECTOR, "tbody tr")
    ]
    return headers, rows


def _numbers(row: list[str]) -> list[float]:
    return [float(c.replace(",", "").replace("+", "")) for c in row[1:]]


def test_whatif_panel_predicts_a_scenario_and_compares(
    dash_duo: Any, sweep_runs: list[RunSource]
) -> None:
    app = create_app(sweep_runs)
    dash_duo.start_server(app)
    by_limit = {
        (
            r.policy,
            json.loads((r.path / "run.json").read_text())["config"]["engine"]["limit_all_gathers"],
        ): r
        for r in sweep_runs
    }
    assert dash_duo.find_element(f"#{ids.WHATIF_PANEL}").is_displayed() is False

    # The default scenario (backward_pre) from Run A, compared with the sweep's backward_pre run.
    dash_duo.find_element(f"#tab-{ids.TAB_WHATIF}").click()
    dash_duo.wait_for_element(f"#{ids.WHATIF_TABLE} td", timeout=30)
    dash_duo.wait_for_element(f"#{ids.WHATIF_GRAPH} .main-svg", timeout=30)
    headers, rows = _whatif_table(dash_duo)
    assert headers[-1] == "prediction error (%)"
    assert f"measured: {by_limit[('backward_pre', None)].label}" in headers
    assert [r[0] for r in rows][:1] == ["step time (ms)"]
    for row in rows:
        assert all(math.isfinite(v) for v in _numbers(row)), row
    assert _numbers(rows[0])[1] > 0  # predicted step time

    # Another scenario: the rate limiter, K = 2. The compare-with picker follows it.
    limited = by_limit[("backward_pre", 2)]
    _pick(dash_duo, ids.WHATIF_LIMIT, "K = 2")
    dash_duo.wait_for_contains_text(f"#{ids.WHATIF_TABLE}", f"measured: {limited.label}", 30)
    dash_duo.wait_for_contains_text(f"#{ids.WHATIF_SUMMARY}", "backward_pre+limit=2", 30)
    headers, rows = _whatif_table(dash_duo)
    assert all(math.isfinite(v) for row in rows for v in _numbers(row))
    fig = _figure(dash_duo, ids.WHATIF_GRAPH)
    assert fig["titles"][0].startswith("predicted · backward_pre+limit=2")
    assert {"forward", "exposed communication"} <= {t["name"] for t in fig["data"]}
    _screenshot(dash_duo, ids.TAB_WHATIF, bottom_of=ids.WHATIF_PANEL)

    # A non-positive bandwidth: one line in the panel, the app stays up.
    box = dash_duo.find_element(f"#{ids.WHATIF_NETWORK_VALUE}")
    dash_duo.clear_input(box)
    box.send_keys("-1" + Keys.ENTER)
    dash_duo.wait_for_contains_text(
        f"#{ids.WHATIF_OUTPUT} .{ids.ERROR_PANEL_CLASS}", "bandwidth scale must be", 30
    )
    assert not dash_duo.find_elements(f"#{ids.WHATIF_TABLE}")

    # Other tabs hide the panel.
    _open_tab(dash_duo, ids.TAB_OVERVIEW)
    assert dash_duo.find_element(f"#{ids.WHATIF_PANEL}").is_displayed() is False
    assert dash_duo.get_logs() == []
