"""``analyze(load_run(...))`` in this process gives the command's report, byte for byte: the
same per-rank map and the same combine, run without the cache (issue 31, point 1)."""

from __future__ import annotations

import pytest

from overlapscope.analysis.api import analyze
from overlapscope.analysis.critical_path.report import report_text
from overlapscope.analysis.report import text
from overlapscope.cli import main
from overlapscope.trace.run.loader import load_run
from tests.golden.outputs import EXTERNAL, EXTERNAL_DIR, REPO, SHIPPED

RUNS = [*SHIPPED, *(f"{EXTERNAL_DIR}/{n}" for n in EXTERNAL)]


@pytest.mark.parametrize("path", RUNS)
def test_analyze_in_process_is_the_commands_report(
    path: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    assert main(["analyze", path, "--no-progress"]) == 0
    command = capsys.readouterr().out
    a = analyze(load_run(path, progress=False))
    assert (
        text(a) + report_text(a.clocks, a.clocks_applied, a.path, a.clocks_shared_host) == command
    )
