"""Issue 40 point 1: nothing the suite (or a notebook) did before stops ``--hta`` from ending.

The hang this reproduces: HTA 0.5.0 parses ranks in a ``fork`` pool; forked from a process
that held a live Dask client's IO-loop and offload threads and ``main()``'s SIGTERM/SIGHUP
handlers, a worker sat on its queue's lock while the caller joined it. Now ``main()`` gives
back the handlers it set, and HTA runs in a fresh interpreter of its own: this process is
never forked while ``--hta`` runs (watched with ``os.register_at_fork``).
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from overlapscope.analysis.hta.report import hta_available
from overlapscope.cli import main
from tests.conftest import REPO

GPU_RUN = REPO / "traces" / "gpu-engine-gloo2-backward_pre"  # 2 ranks: HTA forks a pool
SIGNALS = (signal.SIGTERM, signal.SIGHUP)

# Set while a test watches for forks of this process; a forked child drops a file in it.
_watch: list[Path] = []


def _note_fork() -> None:
    if _watch:
        (_watch[0] / f"forked-{os.getpid()}").touch()


os.register_at_fork(after_in_child=_note_fork)


@pytest.fixture
def dask_client() -> Iterator[object]:
    """A live Dask client in this process: its IO loop, offload and worker threads run."""
    distributed = pytest.importorskip("distributed", reason="the cluster extra is not installed")
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        assert client.submit(sum, [1, 2]).result(timeout=60) == 3
        yield client


def test_main_gives_back_the_signal_handlers_it_set(tmp_path: Path) -> None:
    mine = {s: (lambda signum, frame: None) for s in SIGNALS}
    old = {s: signal.signal(s, h) for s, h in mine.items()}
    try:
        rc = main(["analyze", str(REPO / "traces" / "none"), "--json", str(tmp_path / "a.json")])
        assert rc == 0
        assert {s: signal.getsignal(s) for s in SIGNALS} == mine
        # also when the command fails (a one-line error) ...
        assert main(["analyze", str(tmp_path / "missing")]) == 2
        assert {s: signal.getsignal(s) for s in SIGNALS} == mine
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@pytest.mark.skipif(not hta_available(), reason="HTA not installed (pip install .[hta])")
def test_hta_after_in_process_main_beside_a_live_dask_client(
    dask_client: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(REPO / "traces" / "none"), "--no-progress"]) == 0
    threads = {t.name for t in threading.enumerate()}
    assert len(threads) > 3, threads  # the Dask threads a fork would have copied
    forks = tmp_path / "forks"
    forks.mkdir()
    _watch.append(forks)
    try:
        for i in range(3):
            out = tmp_path / f"hta-{i}.json"
            rc = main(["analyze", str(GPU_RUN), "--hta", "--json", str(out), "--no-progress"])
            assert rc == 0, capsys.readouterr().err
            hta = json.loads(out.read_text())["hta"]
            assert hta["status"] == "ran", hta
            assert sorted(hta["counted_steps"]) == ["0", "1"]
    finally:
        _watch.clear()
    assert list(forks.iterdir()) == []  # HTA's pool forked its own process, never this one
