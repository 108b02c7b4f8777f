"""``overlapscope sweep``: run several prefetch configurations, repeated, and compare them.

Every configuration runs the same model, seed and batch through the same launcher as
``overlapscope run``; each run is analysed, and the sweep writes ``summary.json``,
``summary.csv``, ``summary.md`` and ``tradeoff.html`` (step time vs peak memory).
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from overlapscope.commands import COMMANDS
from overlapscope.commands.engine_flags import add_engine_flags, config_from_args
from overlapscope.commands.flags import int_at_least
from overlapscope.config import DEFAULT_LIMIT_WINDOW, RunConfig
from overlapscope.errors import UserError
from overlapscope.outputs import check_dir, check_replace, only_ours, replace_dir
from overlapscope.sweep import (
    RunEvent,
    parse_points,
    points_table,
    run_sweep,
    summarize,
    write_outputs,
)
from overlapscope.sweep.report import SUMMARY_JSON
from overlapscope.sweep.spec import GRAMMAR

DEFAULT_POLICIES = "none,backward_post,backward_pre,backward_pre+limit"


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "sweep",
        help=COMMANDS["sweep"].help,
        # Plain text: the module docstring is for developers (reST markup).
        description="Run several prefetch configurations, repeated, and compare them. Every "
        "configuration runs the same model, seed and batch through the same launcher as "
        "overlapscope run; each run is analysed, and the sweep writes summary.json, "
        "summary.csv, summary.md and tradeoff.html (step time vs peak memory).",
    )
    p.add_argument(
        "--policies",
        default=DEFAULT_POLICIES,
        metavar="P1,P2,...",
        help=f"comma-separated configurations, each {GRAMMAR}: +limit[=K] rate limiter "
        "(K: --limit-all-gathers), +fwd forward prefetch, +ckpt[=all|every-N] activation "
        "checkpointing (+ckpt: all), +offload CPU offload (default: %(default)s)",
    )
    p.add_argument(
        "--repeats",
        type=int_at_least(1),
        default=3,
        metavar="R",
        help="runs per configuration (default: %(default)s)",
    )
    p.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="sweep directory to create"
    )
    p.add_argument("--force", action="store_true", help="replace --out if it is a sweep")
    add_engine_flags(p, with_policy=False)
    p.set_defaults(func=run)
    return p


# Everything a sweep directory holds; a folder with anything else is the user's.
SWEEP_ENTRIES = re.compile(r"summary\.(json|csv|md)|tradeoff\.html|runs")


def is_sweep_dir(path: Path) -> bool:
    """``path`` is a sweep overlapscope wrote: ``summary.json`` and nothing but sweep files."""
    return only_ours(path, SUMMARY_JSON, SWEEP_ENTRIES)


def _meta(base: RunConfig, repeats: int) -> dict[str, Any]:
    m = base.model
    return {
        "command": shlex.join(["overlapscope", *sys.argv[1:]]),
        "nproc": base.nproc,
        "device": base.device,
        "backend": base.backend,
        "model": f"{m.kind.value} layers={m.layers} dim={m.dim} seq_len={m.seq_len}",
        "global_batch": base.global_batch,
        "seed": base.seed,
        "steps": base.steps,
        "link_gbit": base.link_gbit,
        "repeats": repeats,
        "base_config": base.to_dict(),
    }


_SHOWN = {
    "config": "config",
    "repeats": "n",
    "step_time_per_step_ms": "step ms",
    "step_time_spread_pct": "spread %",
    "throughput_samples_s": "samples/s",
    "exposed_comm_per_step_ms": "exposed ms",
    "nccl_wait_per_step_ms": "wait ms",
    "overlap_pct": "overlap %",
    "peak_mem_mib": "peak MiB",
}


def _table(summary: Any) -> Table:
    t = Table(title="sweep: medians over repeats (all columns in summary.csv)")
    for c, head in _SHOWN.items():
        t.add_column(head, justify="left" if c == "config" else "right", no_wrap=c == "config")
    for row in summary[list(_SHOWN)].itertuples(index=False):
        t.add_row(*(f"{v:,.1f}" if isinstance(v, float) else str(v) for v in row))
    return t


def _run_all(base: RunConfig, points: list[Any], repeats: int, out: Path) -> Any:
    """Every (point, repeat) into ``out``, with a progress bar on stderr."""
    console = Console(stderr=True)
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} runs"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task("sweep", total=len(points) * repeats)

        def on_event(e: RunEvent) -> None:
            what = {"run": "running", "analyze": "analysing", "done": "done"}[e.stage]
            progress.update(task, description=f"{e.point.label} rep {e.repeat}: {what}")
            if e.stage == "done":
                progress.advance(task)

        return run_sweep(base, points, repeats, out, on_event)


def run(args: argparse.Namespace) -> int:
    try:
        # --forward-prefetch applies to every point; --limit-all-gathers K is the window of a
        # bare "+limit" (a point without +limit runs without the rate limiter).
        points = parse_points(
            args.policies,
            forward_prefetch=args.forward_prefetch,
            default_limit=args.limit_all_gathers or DEFAULT_LIMIT_WINDOW,
        )
    except ValueError as e:
        raise UserError(str(e)) from None
    check_dir(args.out, "--out")
    base = config_from_args(args, policy=points[0].policy.value)
    try:
        for point in points:  # every configuration is valid before anything is created
            point.apply(base)
    except ValueError as e:
        raise UserError(str(e)) from None
    out = args.out.resolve()
    check_replace(out, "--out", force=args.force, is_replaceable=is_sweep_dir)
    result: dict[str, Any] = {}

    def build(tmp: Path) -> None:  # the old sweep stays until this one is complete
        runs = _run_all(base, points, args.repeats, tmp)
        result["summary"] = summary = summarize(runs, points_table(points))
        result["paths"] = write_outputs(tmp, summary, runs, _meta(base, args.repeats))

    replace_dir(
        out,
        build,
        flag="--out",
        force=args.force,
        is_replaceable=is_sweep_dir,
        keep_on_failure=True,
    )
    summary = result["summary"]
    paths = [out / p.name for p in result["paths"]]
    Console().print(_table(summary))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
