"""Shared helpers of the reliability tests: run a command the way a user does and check that
it ended cleanly (exit 0, or exit 2 with one ``overlapscope: error:`` line), and that no file
it was given changed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dashboards.guard import declared_outputs
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


# ---------------------------------------------------------------- dashboard callback requests


def callback_request(
    app: Any, output: str, values: dict[tuple[str, str], object]
) -> dict[str, Any]:
    """A request for the callback ``output`` as Dash's renderer sends it, with ``values``
    per (id, property) (left out: none sent, as for an unset property)."""
    spec = app.callback_map[output]
    outs = [{"id": i, "property": p} for i, p in declared_outputs(output)]

    def items(part: str) -> list[dict[str, Any]]:
        out = []
        for d in spec.get(part, []):
            key = (d["id"], d["property"])
            out.append(
                {
                    "id": key[0],
                    "property": key[1],
                    **({"value": values[key]} if key in values else {}),
                }
            )
        return out

    inputs = items("inputs")
    return {
        "output": output,
        "outputs": outs if output.startswith("..") else outs[0],
        "inputs": inputs,
        "state": items("state"),
        "changedPropIds": [f"{inputs[0]['id']}.{inputs[0]['property']}"],
    }


def good_values(app: Any) -> dict[tuple[str, str], object]:
    from dashboards import ids

    key = next(iter(app.server.config["OVERLAPSCOPE_REGISTRY"].sources)).key
    return {
        (ids.RUN_A, "value"): key, (ids.RUN_B, "value"): None, (ids.STEP, "value"): 2,
        (ids.TABS, "value"): ids.TAB_OVERVIEW, (ids.CLOCKS, "value"): "aligned",
        (ids.RANKS, "value"): [], (ids.TIMELINE_GRAPH, "relayoutData"): {"xaxis.range": [0, 5]},
        (ids.WHATIF_POLICY, "value"): "none", (ids.WHATIF_FORWARD_PREFETCH, "value"): [],
        (ids.WHATIF_LIMIT, "value"): "off", (ids.WHATIF_NETWORK_MODE, "value"): "scale",
        (ids.WHATIF_NETWORK_VALUE, "value"): 1.0, (ids.WHATIF_TARGET, "value"): None, (ids.GROUP, "value"): None,
    }  # fmt: skip


def post(client: Any, body: object) -> int:
    resp = client.post("/_dash-update-component", data=json.dumps(body),
                       content_type="application/json")  # fmt: skip
    return int(resp.status_code)
