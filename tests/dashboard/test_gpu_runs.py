"""The dashboard draws the real GPU traces (traces/gpu-*) in headless Chromium: the engine's
2-rank staged runs side by side, and a torch FSDP2 trace, with their units named."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dashboards import create_app, ids
from dashboards.data import discover_runs
from dashboards.views import picker_label

from .conftest import TRACES
from .test_browser import _open_tab, _pick, _text

pytestmark = pytest.mark.browser

RUNS = ["gpu-engine-gloo2-none", "gpu-engine-gloo2-backward_pre", "gpu-torch-fsdp2-default"]


def _drawn(dash_duo: Any, graph_id: str) -> dict[str, Any]:
    """Trace names, lane rows and the units in the hover data of a drawn figure."""
    js = (
        "const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');"
        "return JSON.stringify({names: gd.data.map(t => t.name),"
        " rows: [].concat(...gd.data.map(t => Array.from(t.y || []))),"
        " units: [].concat(...gd.data.map(t => Array.from(t.customdata || []).map(c => c[0])))});"
    )
    return dict(json.loads(dash_duo.driver.execute_script(js, graph_id)))


def test_gpu_runs_draw_with_their_units(dash_duo: Any) -> None:
    runs = discover_runs([TRACES / name for name in RUNS])
    app = create_app(runs)
    dash_duo.start_server(app)

    _open_tab(dash_duo, ids.TAB_OVERVIEW)
    table = _text(dash_duo, f"#{ids.OVERVIEW_TABLE}")
    assert all(name in table for name in RUNS)

    # the default pair: the staged runs, none beside backward_pre, both ranks each
    _open_tab(dash_duo, ids.TAB_TIMELINE)
    drawn = _drawn(dash_duo, ids.TIMELINE_GRAPH)
    rows = set(drawn["rows"])
    assert {"rank 0 · compute", "rank 1 · compute", "rank 0 · all-gather"} <= rows
    assert "exposed communication" in drawn["names"]
    assert any(n.endswith("all-gather") for n in drawn["names"])
    assert {"blocks.0", "root"} <= set(drawn["units"])

    # torch FSDP2 on one GPU: its units by their fully qualified names
    fsdp2 = next(r for r in runs if r.label == "gpu-torch-fsdp2-default")
    _pick(dash_duo, ids.RUN_A, picker_label(fsdp2))
    dash_duo.wait_for_contains_text(f"#{ids.TIMELINE_GRAPH}", "gpu-torch-fsdp2-default", timeout=30)
    drawn = _drawn(dash_duo, ids.TIMELINE_GRAPH)
    assert {f"blocks.{i}" for i in range(8)} <= set(drawn["units"])
    assert any(n.startswith("reduce-scatter") for n in drawn["names"])

    _open_tab(dash_duo, ids.TAB_UNITS)
    assert dash_duo.find_element(f"#{ids.UNITS_GRAPH} .main-svg")
    assert dash_duo.get_logs() == []
