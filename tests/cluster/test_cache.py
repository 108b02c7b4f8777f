"""The cache with Dask: a re-analysis reads it and starts no task (no scheduler is needed);
a changed file is parsed again; the client never reads an event."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from overlapscope.cache import Cache
from overlapscope.cli import main
from overlapscope.cluster import client as cluster_client
from overlapscope.cluster.synth import rerank_copies
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


def test_unwritable_cache_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["analyze", str(SHIPPED[0]), "--dask", "local", "--cache", str(blocker)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(blocker) in err and "--cache DIR" in err


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
        m.setattr(Cache, "events_path", refuse)
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


def _worker_callbacks(dask_worker: object) -> list[str]:
    return sorted(getattr(dask_worker, "periodic_callbacks", {}))


def test_local_workers_run_without_dasks_profiler() -> None:
    """``--dask local`` starts its workers without Dask's statistical profiler (its stack
    sampling cost the worker CPU and memory: docs/BENCHMARKS.md)."""
    with cluster_client.connect(cluster_client.LOCAL) as client:
        callbacks = client.run(_worker_callbacks)
    assert callbacks and all("heartbeat" in c and "profile" not in c for c in callbacks.values())
