"""The timeline's critical path and its raw / aligned clocks toggle: builders, then a real
headless Chromium (``pytest --headless``) on a shipped run whose rank 1 clock is moved 20 ms."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dashboards import create_app, ids
from dashboards.critical_path import PATH_NAME, ClockMode, add_paths, panel_path, raw_tables
from dashboards.data import discover_runs
from dashboards.figures import step_panel, timeline_figure
from overlapscope.analysis.api import analyze
from overlapscope.trace.run.loader import load_run
from tests.clocks.conftest import on_separate_hosts
from tests.clocks.test_cli import TWO_HOSTS, shifted_copy
from tests.conftest import REPO

SHIFT_US = 20000.0


def test_raw_tables_undo_the_alignment() -> None:
    base = analyze(on_separate_hosts(load_run(REPO / "traces" / "backward_pre")))
    raw_timeline, _ = raw_tables(base)
    offset = float(base.clocks.set_index("rank").loc[1, "offset_us"])  # type: ignore[union-attr]
    r1 = (base.timeline["rank"] == 1).to_numpy()
    moved = raw_timeline["start_us"].to_numpy() - base.timeline["start_us"].to_numpy()
    assert np.allclose(moved[r1], offset) and np.allclose(moved[~r1], 0.0)


def test_path_is_drawn_across_ranks() -> None:
    a = analyze(on_separate_hosts(load_run(REPO / "traces" / "backward_pre")))
    panel = step_panel("x", a.timeline, a.exposed, a.steps, 2)
    links = panel_path(a, panel.timeline, ClockMode.ALIGNED)
    fig = add_paths(timeline_figure([panel]), [(1, links, panel.origin_us)])
    (path,) = [t for t in fig.data if t.name == PATH_NAME]
    assert len(path.x) == 2 * len(links)
    assert {"rank 0 · compute", "rank 1 · compute", "rank 1 · exposed comm"} <= set(path.y)
    # the line ends at the step's end and goes back to its start, in ms from the panel start
    step = a.path.steps.set_index("step").loc[2]  # type: ignore[union-attr]
    assert path.x[0] == pytest.approx((step["end_us"] - panel.origin_us) / 1e3)
    assert path.x[-1] == pytest.approx((step["start_us"] - panel.origin_us) / 1e3)


def _traces(dash_duo: Any) -> list[dict[str, Any]]:
    js = (
        "const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');"
        "return JSON.stringify({t: gd.data.map(t => ({name: t.name, y: Array.from(t.y || []),"
        " base: Array.from(t.base || []), x: Array.from(t.x || [])})),"
        " titles: (gd.layout.annotations || []).map(a => a.text)});"
    )
    doc = json.loads(dash_duo.driver.execute_script(js, ids.TIMELINE_GRAPH))
    return [*doc["t"], {"titles": doc["titles"]}]


def _first_start_ms(traces: list[dict[str, Any]], rank: int) -> float:
    starts = [
        b
        for t in traces
        if t.get("base")
        for y, b in zip(t["y"], t["base"], strict=True)
        if y.startswith(f"rank {rank} ")
    ]
    return float(min(starts))


@pytest.mark.browser
def test_timeline_draws_path_and_toggles_clocks(dash_duo: Any, tmp_path: Path, monkeypatch) -> None:
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.skip("chromium/chromedriver not installed (run scripts/setup.sh)")
    monkeypatch.setenv("OVERLAPSCOPE_CACHE", str(tmp_path / "cache"))
    run = shifted_copy(tmp_path, 1, SHIFT_US, TWO_HOSTS)
    dash_duo.start_server(create_app(discover_runs([run])))
    dash_duo.find_element(f"#tab-{ids.TAB_TIMELINE}").click()
    dash_duo.wait_for_element(f"#{ids.TIMELINE_GRAPH} .main-svg", timeout=30)
    aligned = _traces(dash_duo)
    assert PATH_NAME in {t.get("name") for t in aligned}
    path = next(t for t in aligned if t.get("name") == PATH_NAME)
    assert {y.split(" · ")[0] for y in path["y"]} == {"rank 0", "rank 1"}

    dash_duo.find_element(f"#{ids.CLOCKS} input[value='raw']").click()
    dash_duo.wait_for_contains_text(f"#{ids.TIMELINE_GRAPH}", "raw clocks", timeout=30)
    raw = _traces(dash_duo)
    # rank 1's bars move by its clock offset (the 20 ms shift plus the run's own ~0.7 ms);
    # rank 0, the reference, stays
    moved_ms = _first_start_ms(raw, 1) - _first_start_ms(aligned, 1)
    assert moved_ms == pytest.approx(SHIFT_US / 1e3, abs=1.0)
    assert _first_start_ms(raw, 0) == pytest.approx(_first_start_ms(aligned, 0))
    assert dash_duo.get_logs() == []
