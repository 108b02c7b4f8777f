"""The ranks tab's Flight Recorder panel on the shipped sample with dumps, and on a run
without them."""

from __future__ import annotations

from pathlib import Path

from dashboards import views
from dashboards.data import RunRegistry, discover_runs
from dashboards.flight_panel import FLIGHT
from tests.conftest import REPO

SAMPLE = REPO / "traces" / "flight-fsdp2-gloo2-slow"


def _panel(run: Path) -> list[object]:
    runs = discover_runs([run])
    registry = RunRegistry(runs)
    out = views.render_view(registry, "ranks", runs[0].key, None, None)
    return [c for c in out if getattr(c, "id", None) == FLIGHT]


def test_the_ranks_tab_shows_the_dumps_findings() -> None:
    panel = _panel(SAMPLE)
    assert len(panel) == 1
    text = str(panel[0])
    assert "rank 1 issues the forward all-gather (unit 2) late" in text
    assert "joined to the profiler trace" in text


def test_a_run_without_dumps_has_no_panel() -> None:
    assert _panel(REPO / "traces" / "backward_pre") == []
