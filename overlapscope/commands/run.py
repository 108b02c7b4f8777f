"""``overlapscope run``: profile N local ranks of the engine on a built-in workload."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from overlapscope.commands import COMMANDS
from overlapscope.commands.engine_flags import add_engine_flags, config_from_args
from overlapscope.config import (
    RunConfig,
)
from overlapscope.engine.launch import launch
from overlapscope.errors import UserError
from overlapscope.manifest import RUN_JSON, read_manifest
from overlapscope.outputs import check_dir, write_file


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "run",
        help=COMMANDS["run"].help,
        description="Train a built-in workload on N local ranks (torchrun) with the sharded "
        "engine, profile a window of steps, and write one Kineto trace per rank plus run.json.",
    )
    add_engine_flags(p)
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="run directory to create")
    p.add_argument("--force", action="store_true", help="replace --out if it is a run")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="only write --out/config.json and print the torchrun command (multi-node)",
    )
    p.set_defaults(func=run)
    return p


def summarize(run_dir: Path) -> str:
    m = read_manifest(run_dir)
    if m is None or m.config is None:
        raise UserError(f"{run_dir / RUN_JSON}: missing or without a config; run it again")
    cfg, prof = m.config, m.profiled_steps
    lines = [
        f"run: {run_dir}",
        f"  {m.world_size} ranks, {m.device}/{m.backend}, {m.config_label()}, "
        f"model {cfg.model.kind.value} x{cfg.model.layers}",
        f"  loss {m.losses[0]:.4f} -> {m.losses[-1]:.4f}",
        "  rank  step time (median of profiled steps)  peak memory  max units alive",
    ]
    for r in range(m.world_size or 0):
        med = statistics.median(m.step_time_us[r][s] for s in prof) / 1e3
        lines.append(
            f"  {r:>4}  {med:>10.1f} ms{'':>26}{m.peak_mem_bytes[r] / 2**20:>8.1f} MiB"
            f"  {m.max_alive_units[r]:>5}"
        )
    lines.append(f"  traces: {', '.join(m.traces)} (steps {list(prof)})")
    lines.append(f"  next: overlapscope analyze {run_dir}")
    return "\n".join(lines)


def dry_run(cfg: RunConfig, out: Path, force: bool) -> str:
    check_dir(out, "--out")
    if (out / "config.json").exists() and not force:
        raise UserError(f"--out {out} already has a config.json: add --force to overwrite it")
    # allow_nan=False: every rank must read config.json back as strict JSON.
    text = json.dumps(cfg.to_dict(), indent=1, allow_nan=False) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    write_file(out / "config.json", text, "--out")
    return (
        f"wrote {out / 'config.json'}; start its {cfg.nproc} ranks (NODES x PER_NODE = "
        f"{cfg.nproc}) by running on every node:\n"
        f"  torchrun --nnodes NODES --nproc-per-node PER_NODE --rdzv-backend c10d "
        f"--rdzv-endpoint HOST:29500 -m overlapscope.engine.worker {out}"
    )


def run(args: argparse.Namespace) -> int:
    check_dir(args.out, "--out")
    cfg = config_from_args(args)
    if args.dry_run:
        print(dry_run(cfg, args.out.resolve(), args.force))
        return 0
    out = launch(cfg, args.out, force=args.force)
    print(summarize(out))
    return 0
