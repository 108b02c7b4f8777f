"""A stopped dashboard exits even when something keeps the interpreter from it
(overlapscope/exit_guard.py): a real process with a thread that never ends."""

from __future__ import annotations

import subprocess
import sys

from tests.reliability.helpers import env_with_repo

STUCK = """
import threading, time
from overlapscope import exit_guard
threading.Thread(target=time.sleep, args=(3600,), name="stuck-worker").start()  # not a daemon
exit_guard.arm(7, "the test server", grace_s=0.5)
"""


def test_a_thread_that_never_ends_does_not_keep_the_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", STUCK], env=env_with_repo(), capture_output=True, text=True,
        timeout=300,  # (only a hang guard: without the exit guard the process never ends)
    )  # fmt: skip
    assert proc.returncode == 7
    first = proc.stderr.splitlines()[0]
    assert first.startswith("warning: the test server had not exited 0.5 s after stopping")
    assert "stuck-worker" in first
    assert (
        'File "<string>"' in proc.stderr or "time.sleep" in proc.stderr or "Thread" in proc.stderr
    )


def test_a_process_that_exits_is_not_held_or_warned() -> None:
    code = "from overlapscope import exit_guard\nexit_guard.arm(7, 'x', grace_s=60)\n"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env_with_repo(), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert (proc.returncode, proc.stderr) == (0, "")
