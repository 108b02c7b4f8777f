"""Start one process per rank inside its namespace, stream rank 0, stop all if one fails.

Lifecycle of one :func:`run_in_namespaces` call::

    start     rank k:  ip netns exec <netns> argv...   (own session, log_dir/rank-k.log)
    watch     poll every 50 ms; rank 0's lines go to the log and to on_rank0_line
    stop      first non-zero exit or timeout -> SIGTERM to every other rank's group,
              SIGKILL to whatever is still inside their namespaces after GRACE_S
    finally   on any exception (Ctrl-C, SIGTERM-as-SystemExit) the same stop runs,
              so no rank outlives the call
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from overlapscope.lab.netns import kill_namespace_processes

POLL_S = 0.05
GRACE_S = 5.0


@dataclass(frozen=True, slots=True)
class RankSlot:
    """Where one rank runs: its namespace, the interface gloo must use, and its address."""

    rank: int
    netns: str
    ifname: str
    addr: str


def _echo(line: str) -> None:
    sys.stdout.write(line)
    sys.stdout.flush()


def _pump(stream: IO[str], log: IO[str], on_line: Callable[[str], None]) -> None:
    """Copy rank 0's output to its log and to ``on_line``, line by line, until EOF."""
    for line in stream:
        log.write(line)
        log.flush()
        on_line(line)


def _start(
    slot: RankSlot, argv: list[str], env: dict[str, str], log_path: Path, pipe: bool
) -> tuple[subprocess.Popen[str], IO[str]]:
    log = log_path.open("w", encoding="utf-8")
    proc = subprocess.Popen(
        ["ip", "netns", "exec", slot.netns, *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if pipe else log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # own process group: SIGTERM reaches the whole rank
    )
    return proc, log


def _stop(procs: Sequence[subprocess.Popen[str]], slots: Sequence[RankSlot]) -> None:
    """SIGTERM every live rank's process group; SIGKILL what is left after GRACE_S."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for p, slot in zip(procs, slots, strict=True):
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        # Workers that left the group (e.g. a launcher's own sessions) are still inside
        # the namespace, which only our processes can enter.
        kill_namespace_processes(slot.netns)
    for p in procs:
        p.wait()


def run_in_namespaces(
    slots: Sequence[RankSlot],
    argv_for_rank: Callable[[RankSlot], list[str]],
    env: Mapping[str, str],
    log_dir: Path,
    timeout_s: float | None,
    on_rank0_line: Callable[[str], None] | None,
) -> list[int]:
    """See :meth:`overlapscope.lab.network.Lab.run_ranks`."""
    log_dir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[str]] = []
    logs: list[IO[str]] = []
    pump: threading.Thread | None = None
    started = time.monotonic()
    try:
        for slot in slots:
            child_env = {"PYTHONUNBUFFERED": "1", **os.environ, **env}
            child_env["GLOO_SOCKET_IFNAME"] = slot.ifname
            log_path = log_dir / f"rank-{slot.rank}.log"
            proc, log = _start(slot, argv_for_rank(slot), child_env, log_path, slot.rank == 0)
            procs.append(proc)
            logs.append(log)
            if slot.rank == 0:
                assert proc.stdout is not None
                pump = threading.Thread(
                    target=_pump, args=(proc.stdout, log, on_rank0_line or _echo), daemon=True
                )
                pump.start()
        _watch(procs, log_dir, started, timeout_s)
    finally:
        _stop(procs, slots[: len(procs)])
        if pump is not None:
            pump.join(timeout=GRACE_S)
        for log in logs:
            log.close()
    return [int(p.returncode) for p in procs]


def _watch(
    procs: Sequence[subprocess.Popen[str]], log_dir: Path, started: float, timeout_s: float | None
) -> None:
    """Poll the ranks until every one exited 0, one failed, or ``timeout_s`` (from
    ``started``) passed; the caller stops whatever still runs."""
    while True:
        codes = [p.poll() for p in procs]
        failed = [k for k, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            k = failed[0]
            print(
                f"overlapscope.lab: rank {k} exited with {codes[k]} "
                f"(see {log_dir / f'rank-{k}.log'}); stopping the other ranks",
                file=sys.stderr,
            )
            return
        if all(c == 0 for c in codes):
            return
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            print(
                f"overlapscope.lab: ranks still running after {timeout_s:g} s; stopping them",
                file=sys.stderr,
            )
            return
        time.sleep(POLL_S)
