"""The rank cache: a re-analysis reads it and starts no task; a changed file is parsed again."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from overlapscope.analysis.api import analyze
from overlapscope.cli import main
from overlapscope.cluster import client as cluster_client
from overlapscope.cluster import run as cluster_run
from overlapscope.cluster.cache import (
    RankCache,
    empty_table,
    parser_digest,
    read_events,
    read_table,
    table_dtypes,
    write_events,
    write_table,
)
from overlapscope.cluster.synth import rerank_copies
from overlapscope.trace.loader import load_run
from tests.cluster.conftest import DaskProcesses
from tests.cluster.test_identical import SHIPPED, report

# Nothing listens here: a run that needs the cluster fails, one served by the cache does not.
NO_SCHEDULER = "tcp://127.0.0.1:9"


def test_reanalysis_reads_only_the_cache(
    dask_two_workers: DaskProcesses,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cluster_client, "CONNECT_TIMEOUT_S", 1)
    run = tmp_path / "run"
    files = rerank_copies(SHIPPED[0], 4, run)
    cache = ("--cache", str(tmp_path / "cache"))
    first = report(capsys, tmp_path, [run], "--dask", dask_two_workers.address, *cache)
    assert report(capsys, tmp_path, [run], "--dask", NO_SCHEDULER, *cache) == first
    # A rewritten rank file is parsed again: it needs the (absent) scheduler.
    st = files[2].stat()
    os.utime(files[2], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert main(["analyze", str(run), "--dask", NO_SCHEDULER, *cache]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert NO_SCHEDULER in err and "cannot reach the Dask scheduler" in err
    assert "--dask local" in err


def test_cache_without_dask_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(SHIPPED[0]), "--cache", str(tmp_path)]) == 2
    assert "--cache is used with --dask" in capsys.readouterr().err


def test_unwritable_cache_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["analyze", str(SHIPPED[0]), "--dask", "local", "--cache", str(blocker)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(blocker) in err and "--cache DIR" in err


def test_worker_with_another_parser_refuses_and_caches_nothing(tmp_path: Path) -> None:
    trace = SHIPPED[0] / "rank-0.pt.trace.json.gz"
    with pytest.raises(RuntimeError, match="install the same overlapscope version"):
        cluster_run.parse_to_cache(str(trace), 0, str(tmp_path), "k", "another-parser")
    assert not list(tmp_path.iterdir())
    key = cluster_run.parse_to_cache(str(trace), 0, str(tmp_path), "k", parser_digest())
    assert key == "k" and (tmp_path / "k.arrow").is_file()


def test_client_never_reads_an_event_table(
    dask_two_workers: DaskProcesses,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client works from the summaries only: reading a rank's events here fails the run
    (the workers, other processes, read them), and a re-analysis after the event tables are
    deleted gives the same report, read whole from the cache or redone from the summaries."""
    local = report(capsys, tmp_path, [SHIPPED[0]])

    def refuse(_self: object, key: str) -> Path:
        raise AssertionError(f"the client read the events of {key}")

    with monkeypatch.context() as m:
        m.setattr(RankCache, "events_path", refuse)
        cache = ("--cache", str(tmp_path / "cache"))
        assert (
            report(capsys, tmp_path, [SHIPPED[0]], "--dask", dask_two_workers.address, *cache)
            == local
        )
    events = [p for p in (tmp_path / "cache").glob("*.arrow")]
    assert len(events) == 2
    for p in events:
        p.unlink()
    assert report(capsys, tmp_path, [SHIPPED[0]], "--dask", NO_SCHEDULER, *cache) == local
    # Without the whole-result entry, the cross-rank work is redone from the summaries.
    results = list((tmp_path / "cache").glob("result-*.pkl"))
    assert len(results) == 1
    results[0].unlink()
    assert report(capsys, tmp_path, [SHIPPED[0]], "--dask", NO_SCHEDULER, *cache) == local


def test_whole_result_entry_names_every_input_and_flag(tmp_path: Path) -> None:
    """The whole-result entry changes with a flag, a rewritten trace, or any file added to
    the run directory (a run.json, a *.partial marker, a file the loader skips)."""
    run = tmp_path / "run"
    files = rerank_copies(SHIPPED[0], 2, run)
    flags = (False, False, True, False)
    token = cluster_run.result_token([run], flags)
    assert cluster_run.result_token([run], flags) == token
    assert cluster_run.result_token([run], (False, False, False, False)) != token
    assert cluster_run.result_token(files, flags) != token
    st = files[0].stat()
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    touched = cluster_run.result_token([run], flags)
    assert touched != token
    (run / "rank-1.partial").write_text("")
    assert cluster_run.result_token([run], flags) != touched


def test_hta_with_dask_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """HTA reads whole traces in the client: refused before any task or connection."""
    flags = ["--dask", NO_SCHEDULER, "--cache", str(tmp_path), "--hta"]
    assert main(["analyze", str(SHIPPED[0]), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--hta" in err and "--dask" in err
    assert not list(tmp_path.iterdir())


def _arrow_pool() -> str:
    import pyarrow

    return str(pyarrow.default_memory_pool().backend_name)


def test_local_workers_take_arrow_buffers_from_the_system_allocator() -> None:
    """``--dask local`` starts its workers with ARROW_DEFAULT_MEMORY_POOL=system (mimalloc,
    pyarrow's default, keeps freed memory resident: docs/BENCHMARKS.md)."""
    with cluster_client.connect(cluster_client.LOCAL) as client:
        pools = client.run(_arrow_pool)
    assert pools and set(pools.values()) == {"system"}


def test_events_file_reads_back_as_pandas_reads_it(tmp_path: Path) -> None:
    """The events' Arrow file, written and read in one thread (cache.write_events), gives
    the columns asked for with the dtypes, categories and values ``pd.read_feather`` gives."""
    events = load_run(SHIPPED[0]).events.drop(columns="rank").reset_index(drop=True)
    path = tmp_path / "events.arrow"
    write_events(path, events)
    columns = ["name", "ts_us", "lane", "seq", "group"]
    got = read_events(path, columns)
    pd.testing.assert_frame_equal(got, pd.read_feather(path, columns=columns))
    pd.testing.assert_frame_equal(got, events[columns])


def _worker_callbacks(dask_worker: object) -> list[str]:
    return sorted(getattr(dask_worker, "periodic_callbacks", {}))


def test_local_workers_run_without_dasks_profiler() -> None:
    """``--dask local`` starts its workers without Dask's statistical profiler (its stack
    sampling cost the worker CPU and memory: docs/BENCHMARKS.md)."""
    with cluster_client.connect(cluster_client.LOCAL) as client:
        callbacks = client.run(_worker_callbacks)
    assert callbacks and all("heartbeat" in c and "profile" not in c for c in callbacks.values())


def test_the_empty_timeline_has_the_timelines_columns() -> None:
    """Without ``--csv`` no rank's timeline rows are made: the report's empty timeline takes
    the columns and dtypes (categories included) of the timeline the local path makes."""
    from overlapscope.analysis.api import analyze
    from overlapscope.cluster.combine import empty_timeline

    for path in SHIPPED[:2]:
        run = load_run(path, progress=False)
        local = analyze(run).timeline
        empty = empty_timeline(run)
        assert len(local) > 0 and len(empty) == 0
        pd.testing.assert_frame_equal(empty, local.iloc[:0], check_index_type=False)


def _odd_table() -> pd.DataFrame:
    """What Arrow alone would not give back: None beside NaN in an object column, unused
    categories, a categorical of no category, int32."""
    return pd.DataFrame(
        {
            "rank": np.array([0, 0, 1, 1], dtype=np.int32),
            "step": [2, 3, 2, -1],
            "name": pd.Series(["a", None, np.nan, "b"], dtype=object),
            "lane": pd.Categorical(["comm", "comm", None, "wait"], ["comm", "wait", "memory"]),
            "unit": pd.Categorical([None] * 4, categories=pd.Index([], dtype=object)),
            "on_gpu": [True, False, True, False],
            "dur_us": [1.5, np.nan, 0.0, 2.0],
        }
    )


@pytest.mark.parametrize("source", ["odd", "empty", "one row", "timeline"])
def test_table_file_gives_the_frame_back(tmp_path: Path, source: str) -> None:
    """A reduced table's file (cache.write_table) reads back equal, dtypes and categories
    included: whole, one step's rows of some columns, no row, or no row read."""
    frames = {
        "odd": _odd_table,
        "empty": lambda: _odd_table().iloc[:0],
        "one row": lambda: _odd_table().iloc[1:2].reset_index(drop=True),
        "timeline": lambda: analyze(load_run(SHIPPED[0])).timeline,
    }
    df = frames[source]()
    path = tmp_path / "t.arrow"
    write_table(path, df)
    pd.testing.assert_frame_equal(read_table(path), df, check_exact=True)
    assert table_dtypes(path) == dict(df.dtypes)
    pd.testing.assert_frame_equal(empty_table(path), df.iloc[:0], check_index_type=False)
    for step in [*df["step"].unique()[:3], 99]:
        rows = df[df["step"] == step].reset_index(drop=True)
        for columns in (None, ["dur_us", "rank"], ["step", "rank"]):
            got = read_table(path, [("step", "==", step)], columns)
            want = rows if columns is None else rows[columns]
            pd.testing.assert_frame_equal(got, want, check_exact=True)
