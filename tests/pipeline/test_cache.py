"""The one cache (issue 31, points 1 and 2): a local re-analysis reads each rank's figures
back; one environment variable (the old one still works, with a line); every key names the
whole package's code, so an edit in a subpackage misses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from overlapscope.cache import source_digest
from overlapscope.cli import main
from overlapscope.cluster.synth import rerank_copies
from overlapscope.pipeline import executor as executor_mod
from overlapscope.pipeline import run as pipeline_run
from overlapscope.pipeline.plan import Inputs
from overlapscope.pipeline.tasks import parse_to_cache
from overlapscope.trace.run.loader import load_run
from tests.conftest import REPO

SHIPPED = sorted(p for p in (REPO / "traces").iterdir() if (p / "run.json").is_file())


def report(capsys: pytest.CaptureFixture[str], out: Path, *args: str) -> tuple[str, str]:
    """(JSON document, text report) of ``overlapscope analyze ARGS``."""
    assert main(["analyze", *args, "--json", str(out)]) == 0
    return out.read_text(), capsys.readouterr().out


@pytest.fixture
def tasks_run(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """(task, how many) of every round the local executor runs, as it runs them."""
    rounds: list[tuple[str, int]] = []
    real = executor_mod.local_map

    def record(fn: Callable[..., Any], args: list[tuple[Any, ...]], **kw: Any) -> list[Any]:
        rounds.append((fn.__name__, len(args)))
        return real(fn, args, **kw)

    monkeypatch.setattr(executor_mod, "local_map", record)
    return rounds


def test_local_reanalysis_reads_each_ranks_figures_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tasks_run: list[tuple[str, int]]
) -> None:
    run = tmp_path / "run"
    files = rerank_copies(SHIPPED[0], 4, run)
    cache = tmp_path / "cache"
    args = (str(run), "--cache", str(cache))
    first = report(capsys, tmp_path / "a.json", *args)
    assert [(n, k) for n, k in tasks_run if n != "step_path"] == [
        ("parse_to_cache", 4),
        ("reduce_rank", 4),
    ]
    tasks_run.clear()
    assert report(capsys, tmp_path / "b.json", *args) == first
    assert tasks_run == []  # the whole analysis, read back
    for entry in cache.glob("result-*.pkl"):
        entry.unlink()
    assert report(capsys, tmp_path / "c.json", *args) == first
    assert tasks_run == []  # every rank's figures and the path, read back
    # A rewritten rank file is parsed and reduced again; the other ranks are read back.
    st = files[2].stat()
    os.utime(files[2], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert report(capsys, tmp_path / "d.json", *args)[1] == first[1]
    assert [(n, k) for n, k in tasks_run if n != "step_path"] == [
        ("parse_to_cache", 1),
        ("reduce_rank", 1),
    ]


def test_no_cache_keeps_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("OVERLAPSCOPE_CACHE", str(cache))
    assert main(["analyze", str(SHIPPED[0]), "--no-cache"]) == 0
    assert not cache.exists()
    assert "step" in capsys.readouterr().out


def test_the_old_variable_still_works_with_a_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OVERLAPSCOPE_CACHE")
    monkeypatch.setenv("OVERLAPSCOPE_CACHE_DIR", str(tmp_path / "old"))
    assert main(["analyze", str(SHIPPED[0])]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "warning: OVERLAPSCOPE_CACHE_DIR is deprecated and will be removed; set "
        f"OVERLAPSCOPE_CACHE instead (using {tmp_path / 'old'})"
    ]
    assert list((tmp_path / "old").glob("result-*.pkl"))


def test_a_default_cache_that_cannot_be_written_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("OVERLAPSCOPE_CACHE", str(blocker / "cache"))
    assert main(["analyze", str(SHIPPED[0])]) == 0
    out = capsys.readouterr()
    assert out.err.count("\n") == 1 and out.err.startswith("warning: ") and str(blocker) in out.err
    assert "analysed without it" in out.err and "step" in out.out


def test_a_cache_given_that_cannot_be_written_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["analyze", str(SHIPPED[0]), "--cache", str(blocker)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(blocker) in err and "--cache DIR" in err


def test_the_digest_covers_every_subpackage(tmp_path: Path) -> None:
    copy = tmp_path / "overlapscope"
    shutil.copytree(REPO / "overlapscope", copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = source_digest(copy)
    assert source_digest(copy) == before
    producer = copy / "trace" / "producers" / "generic.py"
    producer.write_text(producer.read_text() + "\n# edited\n")
    assert source_digest(copy) != before


# Analyses a copy of the run with the package at sys.argv[1]; prints what the cache holds.
CHECK = """
import sys
from pathlib import Path
from overlapscope.cli import main
cache = Path(sys.argv[3])
assert main(["analyze", sys.argv[2], "--cache", str(cache), "--json", sys.argv[4]]) == 0
print(len(list(cache.glob("*.meta.pkl"))), len(list(cache.glob("result-*.pkl"))))
"""


def test_an_edit_in_a_subpackage_misses_the_cache(tmp_path: Path) -> None:
    """Edit a producer of an installed copy of the package: its cached analyses of
    unchanged traces are not served; the edited code parses and analyses them again."""
    pkg = tmp_path / "pkg"
    shutil.copytree(
        REPO / "overlapscope", pkg / "overlapscope", ignore=shutil.ignore_patterns("__pycache__")
    )
    run, cache = tmp_path / "run", tmp_path / "cache"
    shutil.copytree(SHIPPED[0], run)
    env = {**os.environ, "PYTHONPATH": str(pkg)}

    def analyse(out: str) -> str:
        argv = [sys.executable, "-c", CHECK, str(pkg), str(run), str(cache), str(tmp_path / out)]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip().splitlines()[-1]  # (after the report)

    assert analyse("a.json") == "2 1"  # two rank files parsed, one analysis
    assert analyse("b.json") == "2 1"  # read back
    producer = pkg / "overlapscope" / "trace" / "producers" / "generic.py"
    producer.write_text(producer.read_text() + "\n# edited\n")
    assert analyse("c.json") == "4 2"  # parsed and analysed again
    assert (tmp_path / "c.json").read_text() == (tmp_path / "a.json").read_text()


def test_a_worker_with_other_code_refuses_and_caches_nothing(tmp_path: Path) -> None:
    from overlapscope.cache import code_digest

    trace = SHIPPED[0] / "rank-0.pt.trace.json.gz"
    with pytest.raises(RuntimeError, match="install the same overlapscope version"):
        parse_to_cache(str(trace), 0, str(tmp_path), "k", "another-parser")
    assert not list(tmp_path.iterdir())
    assert parse_to_cache(str(trace), 0, str(tmp_path), "k", code_digest()) == "k"
    assert (tmp_path / "k.arrow").is_file()


def test_whole_result_entry_names_every_input_and_flag(tmp_path: Path) -> None:
    """The whole-result entry changes with a flag, a rewritten trace, or any file added to
    the run directory (a run.json, a *.partial marker, a file the loader skips)."""
    run = tmp_path / "run"
    files = rerank_copies(SHIPPED[0], 2, run)
    key = pipeline_run.analysis_key
    token = key(Inputs((run,)), timeline=False, on_demand=True)
    assert key(Inputs((run,)), timeline=False, on_demand=True) == token
    assert key(Inputs((run,)), timeline=False, on_demand=False) != token
    assert key(Inputs((run,), align_clocks=False), timeline=False, on_demand=True) != token
    assert key(Inputs(tuple(files)), timeline=False, on_demand=True) != token
    st = files[0].stat()
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    touched = key(Inputs((run,)), timeline=False, on_demand=True)
    assert touched != token
    (run / "rank-1.partial").write_text("")
    assert key(Inputs((run,)), timeline=False, on_demand=True) != touched


def test_the_empty_on_demand_figures_have_their_columns() -> None:
    """Without ``--csv`` no rank's timeline rows are made: the report's empty timeline takes
    the columns and dtypes (categories included) of the timeline ``analyze`` makes."""
    from overlapscope.analysis.api import analyze

    for path in SHIPPED[:2]:
        run = load_run(path, progress=False)
        local = analyze(run).timeline
        empty = pipeline_run.empty_on_demand(run)["timeline"]
        assert len(local) > 0 and len(empty) == 0
        pd.testing.assert_frame_equal(empty, local.iloc[:0], check_index_type=False)


def test_a_run_named_otherwise_is_reported_as_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report names the trace files as they were given: a cached analysis of the same
    files given by another path is not served as it was named then."""
    run = tmp_path / "run"
    shutil.copytree(SHIPPED[0], run)
    cache = ("--cache", str(tmp_path / "cache"))
    absolute, _ = report(capsys, tmp_path / "a.json", str(run), *cache)
    monkeypatch.chdir(tmp_path)
    relative, _ = report(capsys, tmp_path / "b.json", "run", *cache)
    assert f'"{run}/rank-0.pt.trace.json.gz"' in absolute
    assert '"run/rank-0.pt.trace.json.gz"' in relative
    assert relative.replace('"run/', f'"{run}/') == absolute


def test_the_dashboard_keeps_its_runs_in_the_cache_given(tmp_path: Path) -> None:
    """``overlapscope dashboard --cache DIR`` (no Dask): the dashboard's analyses lie in DIR,
    beside the CLI's."""
    from dashboards.data import RunRegistry, discover_runs
    from overlapscope.pipeline.run import Target

    registry = RunRegistry(discover_runs([SHIPPED[0]]), target=Target(cache_dir=tmp_path))
    registry.load(registry.sources[0].key)
    assert len(list(tmp_path.glob("dashboard-*.pkl"))) == 1
