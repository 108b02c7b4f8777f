"""``overlapscope dashboard --dask``: a 64-rank run opens from its summaries, and the timeline
reads one step of the chosen ranks only (issue 18, point 6)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from dash.testing.wait import until

from dashboards import data, ids, views
from dashboards.big_run import (
    MAX_SHOWN_RANKS,
    VIEW_COLUMNS,
    choose_ranks,
    path_ranks,
    shown_path,
)
from dashboards.critical_path import GAP
from dashboards.data import CalibrationError, RunRegistry, discover_runs
from dashboards.tabs.timeline import windowed_timeline
from overlapscope import table_files
from overlapscope.analysis.critical_path.path import CriticalPath
from overlapscope.cli import main
from overlapscope.cluster import client as cluster_client
from overlapscope.pipeline.run import Target
from tests.conftest import RankSet, free_port

from . import helpers
from .test_app import EXIT_GUARD_S, _serve
from .test_browser import _open_tab, _pick, _screenshot

pytest.importorskip("distributed", reason="the cluster extra is not installed (.[cluster])")

NO_SCHEDULER = "tcp://127.0.0.1:9"  # nothing listens here


def _shown_ranks(fig: Any) -> set[int]:
    """The ranks whose lanes a timeline figure draws (from its y labels ``rank N · lane``)."""
    return {int(str(y).split(" ")[1]) for t in fig.data if t.y is not None for y in t.y if y}


def test_only_the_shown_ranks_timeline_rows_are_read(
    ranks64: RankSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every Arrow file of the cache the dashboard process reads is recorded: none to open
    the run (summaries only; the events are parsed and reduced by worker processes), and for
    the timeline exactly the chosen ranks' timeline files, the drawn columns (the rows of
    one step are filtered from them: tests/pipeline/test_table_files.py)."""
    reads: list[tuple[Path, Any]] = []
    real = table_files.read_arrow

    def spy(path: Path, columns: list[str] | None) -> Any:
        reads.append((Path(path), columns))
        return real(path, columns)

    monkeypatch.setattr(table_files, "read_arrow", spy)
    runs = discover_runs([ranks64.run])
    registry = RunRegistry(runs, target=Target("local", ranks64.cache))
    key = runs[0].key
    loaded = registry.load(key)
    a, timelines = loaded.analysis, loaded.timelines
    assert timelines is not None and a.timeline.empty
    assert sorted(a.ranks["rank"]) == list(range(ranks64.num_ranks))
    for tab in (ids.TAB_OVERVIEW, ids.TAB_UNITS, ids.TAB_RANKS, ids.TAB_TRADEOFF):
        views.render_view(registry, tab, key, None, None)
    assert reads == []

    rank_of = {timelines.file(r): r for r in timelines.ranks}
    step = int(a.steps["step"].max())
    fig = views.timeline_view(registry, key, None, step, ranks=[63, 5])[-1].figure
    assert [rank_of[p] for p, _ in reads] == [5, 63]
    assert all(c == list(VIEW_COLUMNS) for _, c in reads)
    assert _shown_ranks(fig) == {5, 63}
    assert f"step {step} · ranks 5, 63 (2 of 64 shown)" in fig.layout.annotations[0].text
    # A zoom redraws the window from the same ranks' rows of that step.
    reads.clear()
    zoom = {"xaxis.range[0]": 1.0, "xaxis.range[1]": 50.0}
    fig = windowed_timeline(registry, key, None, step, zoom, None, [5, 63])
    assert fig is not None and _shown_ranks(fig) == {5, 63}
    assert [rank_of[p] for p, _ in reads] == [5, 63]

    # No choice: the ranks of the step's critical path (at most MAX_SHOWN_RANKS).
    reads.clear()
    out = views.timeline_view(registry, key, None, step, ranks=[])
    default = sorted(path_ranks(a, step)[:MAX_SHOWN_RANKS])
    assert default and sorted(rank_of[p] for p, _ in reads) == default
    assert _shown_ranks(out[-1].figure) == set(default)
    assert out[0].id == ids.RANKS_NOTE
    assert f"{len(default)} of 64 ranks shown" in out[0].children[0].children

    with pytest.raises(CalibrationError, match="opened with --dask"):
        registry.calibration(key)


def test_unreachable_scheduler_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_client, "CONNECT_TIMEOUT_S", 1)
    run = Path(__file__).resolve().parents[2] / "traces" / "none"
    port = ("--port", str(free_port()))
    cache = ("--cache", str(tmp_path / "cache"))
    assert main(["dashboard", str(run), "--dask", NO_SCHEDULER, *cache, *port]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"overlapscope: error: --dask {NO_SCHEDULER}")
    assert "cannot reach the Dask scheduler" in err and "--dask local" in err


def _figure_ranks(dash_duo: Any) -> tuple[str, set[int]]:
    """(panel title, ranks drawn) of the timeline as plotly drew it in the page."""
    js = (
        "const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');"
        "return JSON.stringify({title: gd.layout.annotations[0].text,"
        " ys: [...new Set(gd.data.flatMap(t => Array.from(t.y || [])).filter(y => y))]});"
    )
    got = json.loads(dash_duo.driver.execute_script(js, ids.TIMELINE_GRAPH))
    return str(got["title"]), {int(y.split(" ")[1]) for y in got["ys"]}


def _text_of(dash_duo: Any, element_id: str) -> str:
    """The element's text as the page has it now, read in one script: an element found
    first and read after can be re-rendered between the two (stale element reference)."""
    js = "const el = document.getElementById(arguments[0]); return el ? el.innerText : '';"
    return str(dash_duo.driver.execute_script(js, element_id))


def _graph_fits(dash_duo: Any) -> bool:
    """The timeline's container is as tall as its figure (not the previous render's)."""
    js = (
        "const el = document.getElementById(arguments[0]);"
        "const gd = el && el.querySelector('.js-plotly-plot');"
        "if (!gd || !gd.layout) return [0, null];"
        "return [el.getBoundingClientRect().height, gd.layout.height];"
    )
    box, fig = dash_duo.driver.execute_script(js, ids.TIMELINE_GRAPH)
    return fig is not None and abs(float(box) - float(fig)) < 2  # None while re-drawing


@pytest.mark.browser
def test_a_64_rank_run_served_with_dask_local(dash_duo: Any, ranks64: RankSet) -> None:
    """The CLI with ``--dask local`` serves the run; the page shows its 64 ranks, and the
    timeline the chosen step of the chosen ranks, reloaded when either changes."""
    port = free_port()
    cache = ("--cache", str(ranks64.cache))
    proc, url = _serve(str(ranks64.run), "--dask", "local", *cache, "--port", str(port))
    try:
        dash_duo.driver.get(url)
        dash_duo.wait_for_element(f"#{ids.OVERVIEW_TABLE} td", timeout=60)
        rows = dash_duo.driver.find_elements("css selector", f"#{ids.OVERVIEW_TABLE} tbody tr")
        ranks = [int(r.find_elements("css selector", "td")[2].text) for r in rows]
        assert ranks == list(range(64))

        _open_tab(dash_duo, ids.TAB_TIMELINE)
        note = _text_of(dash_duo, ids.RANKS_NOTE)
        title, shown = _figure_ranks(dash_duo)
        assert "of 64 ranks shown" in note and "of 64 shown" in title
        assert 0 < len(shown) <= MAX_SHOWN_RANKS
        assert all(f"{r}" in note for r in shown)
        first_step = int(title.split(" · step ")[1].split(" ")[0])
        _screenshot(dash_duo, "64-ranks")

        _pick(dash_duo, ids.RANKS, "rank 63")  # one rank chosen: only its lanes
        until(lambda: _figure_ranks(dash_duo)[1] == {63}, timeout=30)
        assert "1 of 64 ranks shown" in _text_of(dash_duo, ids.RANKS_NOTE)
        until(lambda: _graph_fits(dash_duo), timeout=30)  # shrunk to one rank's lanes

        other = first_step + 1
        _pick(dash_duo, ids.STEP, f"step {other}")
        until(lambda: f"step {other} · ranks 63 (1 of 64" in _figure_ranks(dash_duo)[0], 30)
        assert _figure_ranks(dash_duo)[1] == {63}

        _pick(dash_duo, ids.RANKS, "rank 2")
        until(lambda: _figure_ranks(dash_duo)[1] == {2, 63}, timeout=30)

        # Cleared: the default again, the ranks of this step's critical path.
        dash_duo.find_element(f"#{ids.RANKS_PICKER} .dash-dropdown-clear").click()
        dash_duo.find_element("h2").click()  # closes the menu
        until(lambda: "critical path" in _text_of(dash_duo, ids.RANKS_NOTE), 30)
        title, shown = _figure_ranks(dash_duo)
        assert f"step {other}" in title and 1 < len(shown) <= MAX_SHOWN_RANKS
        until(lambda: _graph_fits(dash_duo), timeout=30)  # grown back to their lanes
        assert dash_duo.get_logs() == []
    finally:
        proc.terminate()
        proc.wait(timeout=EXIT_GUARD_S)


def test_concurrent_first_views_analyse_the_run_once(
    sample_run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's first callbacks ask for the run together: one analysis on Dask (one
    LocalCluster with ``local``), the others wait for it."""
    calls: list[str] = []

    def slow(src: Any, _target: Any, _cache: Any) -> Any:
        calls.append(src.key)
        time.sleep(0.3)
        return data.LoadedRun(src, helpers.analysis(), None)

    monkeypatch.setattr(data, "analyse_on_dask", slow)
    runs = discover_runs([sample_run_dir])
    registry = RunRegistry(runs, target=Target("local", tmp_path))
    with ThreadPoolExecutor(4) as pool:
        loaded = list(pool.map(registry.load, [runs[0].key] * 4))
    assert calls == [runs[0].key] and all(r is loaded[0] for r in loaded)


def _path_analysis(num_ranks: int, path_us: dict[int, float]) -> Any:
    """A run of ``num_ranks`` whose step 1 critical path spends ``path_us[rank]`` per rank."""
    links = pd.DataFrame(
        {"step": 1, "rank": list(path_us), "dur_us": list(path_us.values())}, index=None
    )
    path = CriticalPath(links, pd.DataFrame())
    return helpers.analysis(ranks=pd.DataFrame({"rank": range(num_ranks)}), path=path)


@pytest.mark.parametrize(
    ("asked", "path_us", "shown", "left_out", "unknown", "elsewhere"),
    [
        ([], {9: 5.0, 3: 9.0}, (3, 9), (), (), ()),
        ([], {r: float(r) for r in range(10)}, tuple(range(2, 10)), (), (), (0, 1)),
        ([], {}, (0, 1, 2, 3), (), (), ()),
        ([7, 7, 2], {3: 1.0}, (2, 7), (), (), (3,)),
        (list(range(12, 2, -1)), {}, tuple(range(5, 13)), (4, 3), (), ()),
        ([1, 99, "x", True, None], {}, (1,), (), ("99", "x", "True", "None"), ()),
        ("not a list", {4: 1.0}, (4,), (), (), ()),
    ],
    ids=["path", "path-capped", "no-path", "chosen", "chosen-capped", "unknown", "not-a-list"],
)
def test_choose_ranks(
    asked: Any,
    path_us: dict[int, float],
    shown: tuple[int, ...],
    left_out: tuple[int, ...],
    unknown: tuple[str, ...],
    elsewhere: tuple[int, ...],
) -> None:
    choice = choose_ranks(_path_analysis(16, path_us), 1, asked)
    assert (choice.shown, choice.left_out, choice.unknown) == (shown, left_out, unknown)
    assert choice.path_elsewhere == elsewhere and choice.num_ranks == 16
    assert f"{len(shown)} of 16 ranks shown" in choice.note("run", 1)


def test_path_on_the_shown_ranks_breaks_where_it_leaves_them() -> None:
    """Links latest first: 0 -> (rank 5, not shown) -> 0 -> 2 gives two pieces."""
    links = pd.DataFrame({"step": [1, 1, 1, 1, 2], "rank": [0, 5, 0, 2, 0]})
    kept = shown_path(CriticalPath(links, pd.DataFrame()), [0, 2])
    assert kept is not None
    assert kept.links["rank"].tolist() == [0, 0, 2, 0]
    assert kept.links[GAP].tolist() == [False, True, False, False]
