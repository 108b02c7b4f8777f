"""Launch the ranks of a run with PyTorch's elastic launcher (torchrun), atomically.

The ranks write into a hidden staging directory beside ``--out``; only a run whose every
rank succeeded (``run.json`` written) is renamed to ``--out`` (replacing an old run only
then, with ``--force``, and only a folder overlapscope wrote). A failed or interrupted run is
kept as a fresh ``<out>.failed/`` (``.failed-2``, ... beside an earlier one) with every rank's
log, and the error names the first rank that failed and its log. An interruption (Ctrl-C,
SIGTERM) stops torchrun and every worker it started before the command exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from overlapscope.config import RunConfig
from overlapscope.errors import UserError
from overlapscope.manifest import RUN_JSON
from overlapscope.outputs import (
    check_dir,
    check_replace,
    keep_failed,
    only_ours,
    signals_deferred,
    swap_in,
    write_file,
)
from overlapscope.trace.naming.files import RUN_ID_ENV

WORKER = "overlapscope.engine.worker"
# Everything a run directory holds; a folder with anything else is the user's, never replaced.
RUN_ENTRIES = re.compile(r"run\.json|config\.json|logs|rank-\d+\.pt\.trace\.json(\.gz)?")
STOP_GRACE_S = 5.0


def is_run_dir(path: Path) -> bool:
    """``path`` is a run overlapscope wrote: ``run.json`` and nothing but run files."""
    return only_ours(path, RUN_JSON, RUN_ENTRIES)


def torchrun_argv(run_dir: Path, launcher_args: list[str]) -> list[str]:
    """``python -m torch.distributed.run LAUNCHER_ARGS -m overlapscope.engine.worker RUN_DIR``."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *launcher_args,
        "-m",
        WORKER,
        str(run_dir),
    ]


def _env(cfg: RunConfig, run_id: str) -> dict[str, str]:
    env = dict(os.environ)
    env[RUN_ID_ENV] = run_id  # stamped into every rank's trace and listed in run.json
    env["OMP_NUM_THREADS"] = str(cfg.threads_per_rank)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    return env


def _first_failure(run_dir: Path) -> str:
    errors = sorted((run_dir / "logs").glob("rank-*.error"), key=lambda p: p.stat().st_mtime)
    if not errors:
        return "a rank exited without reporting an error"
    first = errors[0]
    rank = first.name.removeprefix("rank-").removesuffix(".error")
    return f"rank {rank} failed: {first.read_text().strip()}"


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (torchrun puts each worker in its own session, so a
    process group does not reach them)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def stop_tree(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``proc`` and every process below it: SIGTERM, then SIGKILL after a grace."""
    with signals_deferred():
        pids = [proc.pid, *descendants(proc.pid)]
        _signal_all(pids, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        _signal_all([proc.pid, *descendants(proc.pid), *pids[1:]], signal.SIGKILL)
        proc.wait()


def _run_local(cfg: RunConfig, staging: Path, run_id: str) -> int:
    with (staging / "logs" / "launcher.log").open("wb") as log:
        local = ["--standalone", "--nnodes", "1", "--nproc-per-node", str(cfg.nproc)]
        # Its own session: a Ctrl-C or a signal to our group reaches us, and we stop the tree.
        proc = subprocess.Popen(
            torchrun_argv(staging, local), stderr=log, env=_env(cfg, run_id), start_new_session=True
        )
        try:
            return proc.wait()
        finally:
            if proc.poll() is None or descendants(proc.pid):
                stop_tree(proc)


def _run_in_lab(cfg: RunConfig, staging: Path, run_id: str) -> int:
    """One torchrun per rank, each in its own network namespace behind the shaped link
    (the same worker a multi-node ``torchrun --nnodes N --node-rank K`` starts)."""
    from overlapscope.lab import RankSlot, check_lab_available, shaped_network

    check_lab_available()
    with shaped_network(cfg.nproc, cfg.link_gbit) as lab:

        def argv(slot: RankSlot) -> list[str]:
            node = ["--nnodes", str(cfg.nproc), "--node-rank", str(slot.rank)]
            node += ["--nproc-per-node", "1", "--master-addr", lab.master_addr]
            return torchrun_argv(staging, [*node, "--master-port", str(lab.master_port)])

        codes = lab.run_ranks(argv, _env(cfg, run_id), staging / "logs")
    return 0 if all(c == 0 for c in codes) else 1


def launch(cfg: RunConfig, out: Path, *, force: bool = False) -> Path:
    """Run ``cfg`` and return the completed run directory (``out``)."""
    out = check_dir(out, "--out").resolve()
    check_replace(out, "--out", force=force, is_replaceable=is_run_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    staging.chmod(0o755)
    (staging / "logs").mkdir()
    write_file(staging / "config.json", json.dumps(cfg.to_dict(), indent=1) + "\n", "--out")
    ok = False
    try:
        run_id = uuid.uuid4().hex  # this run's identity (trace.files.RUN_STAMP_KEY)
        run = _run_in_lab if cfg.link_gbit is not None else _run_local
        rc = run(cfg, staging, run_id)
        ok = rc == 0 and (staging / RUN_JSON).exists()
    finally:
        if not ok:
            failed = keep_failed(staging, out)
    if not ok:
        raise UserError(
            f"{_first_failure(failed)} (logs: {failed}/logs/; the run was not written to {out})"
        )
    swap_in(staging, out)
    return out
