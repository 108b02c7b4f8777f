"""Thin, checked wrappers around ``ip`` and ``tc``: namespaces, links, qdiscs, processes.

Every function here runs the real iproute2 binaries; nothing is emulated. Names of the
namespaces this package creates follow one pattern, ``ovs<pid>x<seq><role>`` (``role`` is
``r<k>`` for rank ``k``, ``hub`` for the bridge, ``chk`` for the availability probe), so that
concurrent labs never collide and leftovers of dead processes can be found and removed.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Sequence

from overlapscope.errors import UserError

NAME_PREFIX = "ovs"
_NAME_RE = re.compile(rf"^{NAME_PREFIX}(?P<pid>\d+)x\d+(?:r\d+|hub|chk)$")


class LabError(RuntimeError):
    """An ``ip``/``tc`` command failed although the lab was reported available."""


def run_cmd(argv: Sequence[str], *, check: bool = True) -> str:
    """Run one iproute2 command; return its stdout, raise :class:`LabError` with stderr."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise LabError(f"`{' '.join(argv)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def list_namespaces() -> list[str]:
    """Names of all named network namespaces (``ip netns list``), ids stripped."""
    out = run_cmd(["ip", "netns", "list"])
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def list_links(netns: str | None = None) -> list[str]:
    """Interface names in ``netns`` (the root namespace when ``None``)."""
    argv = ["ip", "-o", "link", "show"] if netns is None else ["ip", "-n", netns, "-o", "link"]
    names = []
    for line in run_cmd(argv).splitlines():
        # "7: p0@if6: <BROADCAST,...>" -> "p0"
        names.append(line.split(":", 2)[1].strip().split("@", 1)[0])
    return names


def namespace_pids(netns: str) -> list[int]:
    """Processes running inside ``netns`` (``ip netns pids``)."""
    out = run_cmd(["ip", "netns", "pids", netns], check=False)
    return [int(tok) for tok in out.split() if tok.isdigit()]


def kill_namespace_processes(netns: str) -> None:
    """SIGKILL every process left inside one of *our* namespaces (all are our descendants)."""
    for pid in namespace_pids(netns):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def delete_namespaces(names: Sequence[str]) -> None:
    """Kill what still runs inside each namespace, then delete it; veths inside go with it.

    Tries every name before raising, so one failure cannot leave the others behind.
    """
    present = set(list_namespaces())
    errors = []
    for name in names:
        if name not in present:
            continue
        kill_namespace_processes(name)
        proc = subprocess.run(
            ["ip", "netns", "delete", name], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            errors.append(f"{name}: {proc.stderr.strip()}")
    if errors:
        raise LabError("could not delete namespaces: " + "; ".join(errors))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_namespaces() -> list[str]:
    """Delete ``ovs<pid>...`` namespaces whose creating process no longer exists."""
    stale = []
    for name in list_namespaces():
        m = _NAME_RE.match(name)
        if m and not _pid_alive(int(m["pid"])):
            stale.append(name)
    delete_namespaces(stale)
    return stale


def check_lab_available(*, euid: int | None = None, path: str | None = None) -> None:
    """Raise :class:`UserError` (one line, with the fix) if the lab cannot run here.

    ``euid`` and ``path`` default to this process's effective uid and ``$PATH``; passing them
    checks another identity or search path (used by the tests to exercise the messages).
    Checks, in order: root, ``ip`` and ``tc`` on the path, and that a ``tbf`` qdisc can
    really be created (in a throwaway namespace that is always deleted).
    """
    uid = os.geteuid() if euid is None else euid
    if uid != 0:
        raise UserError(
            "--link-gbit needs root (network namespaces and tc); run as root, e.g. `sudo -E "
            "overlapscope ...`, or drop --link-gbit"
        )
    for tool in ("ip", "tc"):
        if shutil.which(tool, path=path) is None:
            raise UserError(
                f"--link-gbit needs `{tool}` from iproute2, which is not on PATH; install it "
                "(`apt-get install iproute2`) or drop --link-gbit"
            )
    probe = f"{NAME_PREFIX}{os.getpid()}x{next_seq()}chk"
    try:
        run_cmd(["ip", "netns", "add", probe])
        run_cmd(["ip", "-n", probe, "link", "set", "lo", "up"])
        tbf = ["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "tbf"]
        run_cmd([*tbf, "rate", "1gbit", "burst", "64kb", "latency", "20ms"])
    except LabError as e:
        raise UserError(
            "--link-gbit needs network namespaces and the tc `tbf` qdisc, and this kernel "
            f"refused ({e}); load it with `modprobe sch_tbf` or drop --link-gbit"
        ) from None
    finally:
        delete_namespaces([probe])


# A per-process counter, so two labs in one process get different names.
_SEQ = itertools.count()


def next_seq() -> int:
    """The next number of this process's counter of lab names."""
    return next(_SEQ)
