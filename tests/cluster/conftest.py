"""Real Dask processes on loopback: a ``dask scheduler`` and ``dask worker`` processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import REPO

pytest.importorskip("distributed", reason="the cluster extra is not installed (.[cluster])")

START_TIMEOUT_S = 120


@dataclass
class DaskProcesses:
    """A scheduler and its workers, started as real processes; ``close()`` ends them all."""

    address: str = ""
    scheduler: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def close(self) -> None:
        for p in [*self.workers, *([self.scheduler] if self.scheduler else [])]:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)


def _env(extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def start_dask(tmp: Path, num_workers: int, env: dict[str, str] | None = None) -> DaskProcesses:
    """``dask scheduler --host 127.0.0.1 --port 0`` and ``num_workers`` ``dask worker``s."""
    procs = DaskProcesses()
    sched_file = tmp / "scheduler.json"
    full_env = _env(env or {})
    sched_cmd = ["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0"]
    worker_opts = ["--nthreads", "1", "--no-nanny", "--no-dashboard"]
    try:
        procs.scheduler = subprocess.Popen(
            [
                sys.executable,
                "-m",
                *sched_cmd,
                "--no-dashboard",
                "--scheduler-file",
                str(sched_file),
            ],
            env=full_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not sched_file.is_file() and time.monotonic() < deadline:
            assert procs.scheduler.poll() is None, "dask scheduler exited at start"
            time.sleep(0.1)
        procs.address = json.loads(sched_file.read_text())["address"]
        for _ in range(num_workers):
            procs.workers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "distributed.cli.dask_worker",
                        procs.address,
                        *worker_opts,
                    ],
                    env=full_env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        from distributed import Client

        with Client(procs.address, timeout=START_TIMEOUT_S) as client:
            if num_workers:
                client.wait_for_workers(num_workers, timeout=START_TIMEOUT_S)
    except BaseException:
        procs.close()
        raise
    return procs


@pytest.fixture(scope="module")
def dask_two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskProcesses]:
    procs = start_dask(tmp_path_factory.mktemp("dask"), 2)
    try:
        yield procs
    finally:
        procs.close()
