"""SIGTERM or SIGINT to ``bench-collectives`` (the process or its group) stops every rank it
started, removes the lab's namespaces and writes no result file (issue #21, point 5).

Real processes in a real lab; the signal is sent once both ranks are up. Deadlines only guard
against a hang."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lab.support import needs_lab, root_state
from tests.reliability.helpers import (
    env_with_repo,
    pid_alive,
    sigint_as_a_terminal_gives_it,
    signal_when_ready,
    wait_for,
)


@pytest.mark.root
@pytest.mark.multirank
@needs_lab
@pytest.mark.parametrize(
    ("sig", "to_group"), [(signal.SIGTERM, True), (signal.SIGINT, False)], ids=["TERM-group", "INT"]
)
def test_signal_stops_the_benchmark_and_its_lab(
    sig: signal.Signals, to_group: bool, tmp_path: Path
) -> None:
    before = root_state()
    logs, out = tmp_path / "logs", tmp_path / "bench.json"
    # 64 MB at 0.05 Gbit/s: each iteration takes seconds, the whole run minutes
    argv = ["bench-collectives", "--nproc", "2", "--link-gbit", "0.05", "--sizes", "64MB"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "overlapscope", *argv, "--iters", "20", "--json", str(out),
         "--log-dir", str(logs)],
        env=env_with_repo(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=sigint_as_a_terminal_gives_it,
    )  # fmt: skip
    started, err = signal_when_ready(
        proc, lambda: len(list(logs.glob("rank-*.log"))) == 2, sig, to_group
    )
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err
    wait_for(lambda: not any(pid_alive(p) for p in started), "ranks stopped")
    assert not out.exists(), "an interrupted benchmark wrote a result"
    assert list(logs.glob("rank-*.log")), "the logs written so far are kept"
    namespaces, _ = root_state()
    assert namespaces <= before[0], f"lab namespaces left: {namespaces - before[0]}"
