"""Launch the ranks of a run with PyTorch's elastic launcher (torchrun), atomically.

The ranks write into a hidden staging directory beside ``--out``; only a run whose every
rank succeeded (``run.json`` written) is renamed to ``--out`` (replacing an old run only
then, with ``--force``). A failed run is kept as ``<out>.failed/`` with every rank's log, and
the error names the first rank that failed and its log.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from overlapscope.engine.recipe import RunConfig
from overlapscope.errors import UserError
from overlapscope.trace.files import RUN_MANIFEST

WORKER = "overlapscope.engine.worker"


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


def _env(cfg: RunConfig) -> dict[str, str]:
    env = dict(os.environ)
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


def _run_local(cfg: RunConfig, staging: Path) -> int:
    with (staging / "logs" / "launcher.log").open("wb") as log:
        local = ["--standalone", "--nnodes", "1", "--nproc-per-node", str(cfg.nproc)]
        proc = subprocess.run(torchrun_argv(staging, local), stderr=log, env=_env(cfg))
    return proc.returncode


def _run_in_lab(cfg: RunConfig, staging: Path) -> int:
    """One torchrun per rank, each in its own network namespace behind the shaped link
    (the same worker a multi-node ``torchrun --nnodes N --node-rank K`` starts)."""
    from overlapscope.lab import RankSlot, check_lab_available, shaped_network

    check_lab_available()
    with shaped_network(cfg.nproc, cfg.link_gbit) as lab:

        def argv(slot: RankSlot) -> list[str]:
            node = ["--nnodes", str(cfg.nproc), "--node-rank", str(slot.rank)]
            node += ["--nproc-per-node", "1", "--master-addr", lab.master_addr]
            return torchrun_argv(staging, [*node, "--master-port", str(lab.master_port)])

        codes = lab.run_ranks(argv, _env(cfg), staging / "logs")
    return 0 if all(c == 0 for c in codes) else 1


def launch(cfg: RunConfig, out: Path, *, force: bool = False) -> Path:
    """Run ``cfg`` and return the completed run directory (``out``)."""
    out = out.resolve()
    if out.exists() and not force:
        raise UserError(f"--out {out} already exists: pick a new directory or add --force")
    if out.exists() and not (out / RUN_MANIFEST).exists() and any(out.iterdir()):
        raise UserError(
            f"--out {out} exists and is not an overlapscope run: refusing to replace it"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "logs").mkdir(parents=True)
    (staging / "config.json").write_text(json.dumps(cfg.to_dict(), indent=1) + "\n")
    rc = 1
    try:
        rc = _run_in_lab(cfg, staging) if cfg.link_gbit is not None else _run_local(cfg, staging)
    finally:
        ok = rc == 0 and (staging / RUN_MANIFEST).exists()
        if not ok:
            failed = out.with_name(out.name + ".failed")
            shutil.rmtree(failed, ignore_errors=True)
            staging.rename(failed)
    if not ok:
        raise UserError(
            f"{_first_failure(failed)} (logs: {failed}/logs/; the run was not written to {out})"
        )
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
        staging.rename(out)
        shutil.rmtree(old)
    else:
        staging.rename(out)
    return out
