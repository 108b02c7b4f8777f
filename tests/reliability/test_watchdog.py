"""Issue 40 point 1: the suite's watchdog. A test past the bound fails with every thread's
stack printed and the run goes on; a test stuck where even that cannot reach it ends the run
with the stacks, a grace period later. Each case runs pytest on a small test file in a
subprocess, under this project's own configuration (the bound shortened)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytest.importorskip("pytest_timeout", reason="the dev extra is not installed (pip install .[dev])")

HANGS = """
import signal
import threading
import time


def _bystander():
    time.sleep(60)


def test_hangs():
    threading.Thread(target=_bystander, name="a-bystander-thread", daemon=True).start()
    {block}
    time.sleep(30)


def test_after():
    pass
"""


def _pytest(tmp_path: Path, block: str, grace_s: str) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_hangs.py"
    test.write_text(HANGS.format(block=block))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OVERLAPSCOPE_TEST_WATCHDOG_GRACE_S": grace_s}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"),
         "--rootdir", str(tmp_path), "-p", "tests.conftest", "-p", "no:cacheprovider",
         "-o", "timeout=3", "-q", str(test)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip


def test_the_suite_has_a_bound_of_minutes(request: pytest.FixtureRequest) -> None:
    assert 60 <= float(request.config.getini("timeout")) <= 900
    assert request.config.getini("timeout_method") == "signal"  # fails the test, run goes on


def test_a_test_past_the_bound_fails_with_every_thread_s_stack(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, "pass", grace_s="60")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Timeout" in out and "a-bystander-thread" in out and "_bystander" in out, out
    assert "1 failed, 1 passed" in out, out  # the run went on


def test_a_test_the_bound_cannot_reach_ends_the_run_with_the_stacks(tmp_path: Path) -> None:
    # SIGALRM blocked: pytest-timeout's handler never runs; the last resort does.
    proc = _pytest(tmp_path, "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})", "2")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Timeout (0:00:05)!" in out and "test_hangs" in out and "_bystander" in out, out
