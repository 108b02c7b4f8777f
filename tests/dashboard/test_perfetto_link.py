"""The dashboard's "download for Perfetto" link (issue 35, point 3): one per run shown, for
the step chosen and the ranks shown; the file it serves is that export."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from dash.testing.wait import until

from dashboards import create_app, ids, views
from dashboards.data import RunRegistry, RunSource, default_pair, discover_runs
from dashboards.perfetto_link import LINK_CLASS, export_run, links
from tests.conftest import RankSet
from tests.perfetto.chrome_trace import read_trace

from .test_browser import _pick

READ_LINKS = """
return Array.from(document.querySelectorAll(arguments[0]))
    .map(a => [a.innerText, a.href, a.getAttribute("download")]);
"""


def _links(dash_duo: Any) -> list[tuple[str, str, str]]:
    """(text, href, download) of each link in the page, read in one script: the page may
    draw the links again between finding an element and reading it (a stale element)."""
    found = dash_duo.driver.execute_script(READ_LINKS, f"#{ids.PERFETTO_LINKS} a.{LINK_CLASS}")
    return [(text, href, download) for text, href, download in found]


def _query(href: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(href).query).items()}


@pytest.mark.browser
def test_a_link_per_run_for_the_chosen_step(
    dash_duo: Any, sample_runs: list[RunSource], tmp_path: Path
) -> None:
    app = create_app(sample_runs)
    dash_duo.start_server(app)
    run_a, run_b = default_pair(sample_runs)
    labels = {r.key: r.label for r in sample_runs}
    until(lambda: len(_links(dash_duo)) == 2, timeout=30)
    steps = views.step_options(app.server.config["OVERLAPSCOPE_REGISTRY"], run_a, run_b)
    _pick(dash_duo, ids.STEP, f"step {steps[-1]}")
    until(
        lambda: all(_query(h).get("steps") == str(steps[-1]) for _, h, _ in _links(dash_duo)),
        timeout=20,
    )
    found = _links(dash_duo)
    assert [t.split(" for Perfetto")[0] for t, _, _ in found] == [
        f"⤓ {labels[run_a]}",
        f"⤓ {labels[run_b]}",
    ]
    for text, href, download in found:
        assert f"step {steps[-1]}, 2 ranks" in text
        assert _query(href)["ranks"] == "0,1" and download.endswith(".perfetto.json.gz")
        out = tmp_path / download
        with urllib.request.urlopen(href, timeout=120) as response:
            assert response.headers["Content-Type"] == "application/gzip"
            assert download in response.headers["Content-Disposition"]
            out.write_bytes(response.read())
        trace = read_trace(out)
        assert trace.top["overlapscope_export"]["steps"] == [steps[-1]]
        assert trace.top["overlapscope_export"]["ranks"] == [0, 1]
    assert dash_duo.get_logs() == []


def test_the_route_refuses_in_one_line(sample_runs: list[RunSource]) -> None:
    app = create_app(sample_runs, use_disk_cache=False)
    client = app.server.test_client()
    key = sample_runs[0].key
    for url, status, text in [
        ("/perfetto/nope?steps=2", 404, "unknown run"),
        (f"/perfetto/{key}?steps=x", 400, "give numbers and ranges"),
        (f"/perfetto/{key}?steps=99", 400, "--steps: step 99 is not in the run"),
        (f"/perfetto/{key}?ranks=7", 400, "--ranks: rank 7 is not in the run"),
    ]:
        response = client.get(url)
        assert response.status_code == status, url
        body = response.get_data(as_text=True)
        assert text in body and body.count("\n") == 1, body


def test_a_dask_run_exports_the_ranks_its_timeline_shows(ranks64: RankSet, tmp_path: Path) -> None:
    """A run opened with --dask: the link names the ranks the timeline shows (the picked
    ones, else the step's critical path), and the file holds those ranks, its parts written
    by the tasks."""
    pytest.importorskip("distributed", reason="the cluster extra is not installed (.[cluster])")
    from overlapscope.pipeline.run import Target

    runs = discover_runs([ranks64.run])
    registry = RunRegistry(runs, target=Target("local", ranks64.cache))
    key = runs[0].key
    step = int(registry.load(key).analysis.steps["step"].max())
    (link,) = links(registry, "/", [key, None], step, [63, 5])
    assert _query(link.href) == {"steps": str(step), "ranks": "5,63"}
    out = tmp_path / "big.json.gz"
    export_run(registry, key, (step,), (5, 63), out)
    trace = read_trace(out)
    assert sorted(a["rank"] for a in trace.processes.values() if "rank" in a) == [5, 63]
