"""SIGINT or SIGTERM to ``overlapscope run`` / ``sweep``, to the process or to its group,
stops every process it started and leaves a complete result or a ``DIR.failed/`` with what
was written: no orphan workers, no hidden partial folders (issue #21, point 5).

Real processes: the command runs in its own process group; the signal is sent once every
rank has written to its log. Deadlines here only guard against a hang."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.helpers import (
    TINY_RUN,
    env_with_repo,
    hidden_entries,
    pid_alive,
    sigint_as_a_terminal_gives_it,
    signal_when_ready,
    wait_for,
)


def _ranks_running(folder: Path, num_ranks: int) -> bool:
    logs = [p for p in folder.rglob("rank-*.log") if p.stat().st_size > 0]
    return len(logs) >= num_ranks


CASES = {
    "run-SIGINT-process": (["run"], signal.SIGINT, False),
    "run-SIGTERM-group": (["run"], signal.SIGTERM, True),
    "sweep-SIGTERM-process": (["sweep", "--policies", "none", "--repeats", "1"], signal.SIGTERM, False),
}  # fmt: skip


@pytest.mark.multirank
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_signal_stops_every_process_and_keeps_what_was_written(case: str, tmp_path: Path) -> None:
    command, sig, to_group = CASES[case]
    out = tmp_path / "R"
    argv = [
        sys.executable,
        "-m",
        "overlapscope",
        *command,
        *TINY_RUN,
        "--steps",
        "1000000",
    ]  # never ends by itself
    proc = subprocess.Popen(
        [*argv, "--out", str(out)],
        env=env_with_repo(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a shell job would be
        preexec_fn=sigint_as_a_terminal_gives_it,
    )
    started, err = signal_when_ready(proc, lambda: _ranks_running(tmp_path, 2), sig, to_group)
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err and "interrupted" in err
    # every process it started is gone (torchrun gives each worker its own session, so this
    # looks at the processes themselves, not only the group)
    wait_for(lambda: not any(pid_alive(p) for p in started), "workers stopped")
    assert hidden_entries(tmp_path) == []
    assert not out.exists()
    failed = tmp_path / "R.failed"
    assert failed.is_dir()
    assert list(failed.rglob("rank-*.log")), "the logs written so far are kept"
