"""A worker killed mid-run: the report is complete, or one line names the files not analysed.

Never a report that silently lacks ranks (issue 18, point 2). Real scheduler and workers; the
CLI runs as its own process while a worker is killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from overlapscope.cluster.synth import rerank_copies
from tests.cluster.conftest import DaskProcesses, start_dask
from tests.cluster.test_identical import SHIPPED, report
from tests.conftest import REPO, overlapscope_cmd

NUM_RANKS = 8
HANG_GUARD_S = 300


def analyze_while_killing(procs: DaskProcesses, run: Path, tmp: Path) -> tuple[int, str, int]:
    """Run ``analyze --dask`` and kill a worker once the first rank is cached; returns
    (exit status, stderr, ranks cached when the worker died)."""
    cache = tmp / "cache"
    flags = ["--dask", procs.address, "--cache", str(cache), "--json", str(tmp / "dask.json")]
    cmd = overlapscope_cmd("analyze", str(run), *flags)
    cli = subprocess.Popen(
        cmd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not list(cache.glob("*.meta.pkl")) and time.monotonic() < deadline:
            time.sleep(0.02)
        procs.workers[0].kill()
        done_at_kill = len(list(cache.glob("*.meta.pkl")))
        _, err = cli.communicate(timeout=HANG_GUARD_S)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    return cli.returncode, err, done_at_kill


def test_killed_worker_tasks_are_retried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    rerank_copies(SHIPPED[0], NUM_RANKS, run)
    procs = start_dask(tmp_path, 2)
    try:
        rc, err, done_at_kill = analyze_while_killing(procs, run, tmp_path)
    finally:
        procs.close()
    assert done_at_kill < NUM_RANKS, "the run ended before the worker was killed"
    assert rc == 0, err
    local_json, _ = report(capsys, tmp_path, [run])
    assert json.loads((tmp_path / "dask.json").read_text()) == json.loads(local_json)


def test_killed_worker_without_retries_names_the_files(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rerank_copies(SHIPPED[0], NUM_RANKS, run)
    # (workers as docs advise, without Dask's profiler: else a warning line comes first)
    no_retry = {
        "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0",
        "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
    }
    procs = start_dask(tmp_path, 2, env=no_retry)
    try:
        rc, err, done_at_kill = analyze_while_killing(procs, run, tmp_path)
    finally:
        procs.close()
    assert done_at_kill < NUM_RANKS, "the run ended before the worker was killed"
    assert rc == 2, err
    line = err.strip()
    assert line.count("\n") == 0, err
    assert "rank files not analysed on the Dask cluster" in line and "KilledWorker" in line
    assert str(run / "rank-") in line
    assert not (tmp_path / "dask.json").exists()


def test_no_worker_left_ends_with_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from overlapscope.cli import main
    from overlapscope.cluster import client as cluster_run

    monkeypatch.setattr(cluster_run, "NO_WORKER_S", 1.0)
    monkeypatch.setattr(cluster_run, "POLL_S", 0.2)
    procs = start_dask(tmp_path, 0)
    try:
        rc = main(["analyze", str(SHIPPED[0]), "--dask", procs.address, "--cache", str(tmp_path)])
    finally:
        procs.close()
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0, err
    assert "2 rank files not analysed" in err and "no worker connected" in err
    assert "rank-0.pt.trace.json.gz" in err and "rank-1.pt.trace.json.gz" in err


def test_allow_missing_ranks_warns_for_each_rank_not_analysed(
    dask_two_workers: DaskProcesses,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from overlapscope.cli import main
    from overlapscope.cluster import client as cluster_run

    monkeypatch.setattr(cluster_run, "NO_WORKER_S", 1.0)
    monkeypatch.setattr(cluster_run, "POLL_S", 0.2)
    run = tmp_path / "run"
    files = rerank_copies(SHIPPED[0], 4, run)
    cache = ["--cache", str(tmp_path / "cache")]
    # The three other ranks analysed together first: their tables and critical path are
    # then in the cache, which serves the run below with no worker.
    kept = [str(f) for i, f in enumerate(files) if i != 1]
    allow = "--allow-missing-ranks"
    assert main(["analyze", *kept, "--dask", dask_two_workers.address, *cache, allow]) == 0
    capsys.readouterr()
    st = files[1].stat()
    os.utime(files[1], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # rank 1 must be parsed
    (tmp_path / "idle").mkdir()
    procs = start_dask(tmp_path / "idle", 0)
    try:
        flags = ["--dask", procs.address, *cache, "--allow-missing-ranks", "--json", "-"]
        assert main(["analyze", str(run), *flags]) == 0
    finally:
        procs.close()
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["run"]["ranks"] == [0, 2, 3]
    assert any(
        str(files[1]) in w and "not analysed on the Dask cluster" in w for w in doc["warnings"]
    )
    assert any("1 of 4 ranks missing: 1;" in w for w in doc["warnings"])
