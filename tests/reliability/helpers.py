"""Shared helpers of the reliability tests: run a command the way a user does and check that
it ended cleanly (exit 0, or exit 2 with one ``overlapscope: error:`` line), and that no file
it was given changed."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from overlapscope.cli import main

REPO = Path(__file__).resolve().parents[2]
SAMPLE_RUN = REPO / "traces" / "none"
TINY_RUN = [
    *("--layers", "1", "--dim", "32", "--heads", "2", "--seq-len", "8", "--vocab", "64"),
    *("--global-batch", "2", "--profile-wait", "0", "--profile-warmup", "0"),
    *("--profile-active", "1"),
]


@dataclass(frozen=True, slots=True)
class Outcome:
    code: int
    out: str
    err: str


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> Outcome:
    """``overlapscope ARGS`` in this process; any exception but the clean exits propagates
    (it would be a traceback for the user)."""
    try:
        code = main([str(a) for a in args])
    except SystemExit as e:  # argparse's usage errors
        code = int(e.code or 0)
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err)


def assert_one_line_error(result: Outcome, *needles: str) -> str:
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert "error:" in lines[0] and "Traceback" not in result.err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def digest(path: Path) -> dict[str, str]:
    """Content hash of every file under ``path`` (or of ``path`` itself), by relative name."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {
        str(p.relative_to(path) if p != path else p.name): hashlib.sha256(
            p.read_bytes()
        ).hexdigest()
        for p in files
    }


def copy_sample_run(dest: Path) -> Path:
    shutil.copytree(SAMPLE_RUN, dest)
    return dest


def hidden_entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def live_descendants(pid: int) -> list[int]:
    """Processes below ``pid`` that are alive (not zombies)."""
    from overlapscope.engine.launch import descendants

    return descendants(pid)


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def env_with_repo() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def sigint_as_a_terminal_gives_it() -> None:
    """``preexec_fn`` for a command the tests interrupt with SIGINT: restore its default
    action. A non-interactive shell starts background jobs (a CI runner's, say) with SIGINT
    ignored; the child inherits that, and Python then installs no KeyboardInterrupt handler,
    so the SIGINT that Ctrl-C would send never arrives."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


HANG_GUARD_S = 240.0  # only against a hang: a signalled command stops in seconds


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    """Poll ``predicate`` until true; fail after :data:`HANG_GUARD_S` (a hang, not speed)."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not predicate():
        assert time.monotonic() < deadline, f"hang guard: {what}"
        time.sleep(0.2)


def signal_when_ready(
    proc: subprocess.Popen[str], ready: Callable[[], bool], sig: int, to_group: bool
) -> tuple[list[int], str]:
    """Once ``ready()`` (the command must still be running then), send ``sig`` to the
    command or to its process group and wait for it to end; returns (the processes it had
    started, its stderr). The group is killed whatever happens, so no test leaves it behind."""
    try:
        wait_for(lambda: ready() or proc.poll() is not None, "ready for the signal")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        started = live_descendants(proc.pid)
        assert started, "the command started no process"
        if to_group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return started, err
