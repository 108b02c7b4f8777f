"""``overlapscope bench-collectives``: all-gather / reduce-scatter bus bandwidth over the lab.

Starts ``--nproc`` ranks in the slow-network lab (``overlapscope.lab``), each running
``overlapscope.bench.worker``, and prints one row per (collective, size): median time,
algbw, busbw (nccl-tests definitions, see ``overlapscope.bench.collectives``) and busbw / link rate.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import overlapscope
from overlapscope.bench.collectives import (
    BENCHED,
    TAG,
    BenchConfig,
    BenchRow,
    aligned_size,
    format_size,
    parse_size,
    summarize,
)
from overlapscope.commands import COMMANDS
from overlapscope.commands.config_flags import add_flag, config_from
from overlapscope.commands.flags import positive_float
from overlapscope.errors import UserError
from overlapscope.lab import TbfShape, shaped_network
from overlapscope.outputs import check_dir, check_file, write_file
from overlapscope.phases import CollectiveKind

DEFAULT_SIZES = "1MB,4MB,16MB,64MB"
# Each rank holds the full buffer and its chunks: beyond this a typo, not a benchmark.
MAX_SIZE_BYTES = 1 << 32
TOLERANCE = 0.15  # the bar: large-message busbw within 15% of the link rate
DEFINITIONS = {
    "size_bytes": "full buffer: all-gather output / reduce-scatter input (nccl-tests)",
    "algbw": "size_bytes / median time (Gbit/s = 1e9 bit/s)",
    "busbw": "algbw * (n-1)/n (all-gather and reduce-scatter alike)",
    "implementation": (
        "the engine's gloo collectives (overlapscope/engine/p2p.py): a ring of send/recv, "
        "n-1 rounds, in each every rank sends one block of size_bytes/n to its right "
        "neighbour and receives one from its left; reduce-scatter adds each received "
        "partial sum into its own (in 2 MB pieces)"
    ),
    "time": "per iteration: max over ranks; median over iters after warmup",
    "payload_bytes_per_rank": "what a ring must send from each rank: size_bytes * (n-1)/n",
    "wire_tx_bytes_per_rank": (
        "bytes each rank's lab interface transmitted per iteration (Ethernet/IP/TCP headers, "
        "ACKs and the iteration's barrier included), counted by the kernel"
    ),
}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "bench-collectives",
        help=COMMANDS["bench-collectives"].help,
        # Plain text: the module docstring is for developers (reST markup).
        description="Start --nproc ranks in the slow-network lab (each in its own network "
        "namespace; needs root and iproute2), time the engine's own gloo all-gather and "
        "reduce-scatter (rings of send/recv, overlapscope/engine/p2p.py) and print one row "
        "per (collective, size): median time, algbw, busbw (nccl-tests definitions) and "
        "busbw / link rate.",
    )
    add_flag(p, BenchConfig, "num_ranks")
    add_flag(p, BenchConfig, "link_gbit")
    p.add_argument(
        "--sizes",
        default=DEFAULT_SIZES,
        help="comma-separated full-buffer sizes > 0, K/M/G = 2^10/2^20/2^30 bytes, rounded "
        f"down to a multiple of 4 bytes x --nproc (default: {DEFAULT_SIZES})",
    )
    add_flag(p, BenchConfig, "iters")
    add_flag(p, BenchConfig, "warmup")
    p.add_argument(
        "--json", metavar="FILE|-", help="also write results as JSON ('-': stdout; default: none)"
    )
    p.add_argument(
        "--log-dir", type=Path, metavar="DIR", help="rank logs (default: a new temporary folder)"
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=600.0,
        metavar="S",
        help="give up after S seconds (default: 600)",
    )
    p.set_defaults(func=run)
    return p


def _sizes(text: str, num_ranks: int) -> tuple[int, ...]:
    """``--sizes`` in bytes, each rounded down to equal float32 chunks per rank."""
    sizes = []
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        try:
            size = parse_size(token)
        except ValueError as e:
            raise UserError(f"--sizes: {e}") from None
        if size <= 0:
            raise UserError(f"--sizes {token!r}: every size must be > 0; write e.g. 4MB")
        if size > MAX_SIZE_BYTES:
            raise UserError(f"--sizes {token!r}: every size must be at most 4G; write e.g. 64MB")
        try:
            sizes.append(aligned_size(size, num_ranks))
        except ValueError as e:
            raise UserError(f"--sizes {token!r}: {e}") from None
    return tuple(sizes)


def _config(args: argparse.Namespace) -> BenchConfig:
    if args.nproc < 2:  # (before the sizes are aligned to it)
        raise UserError(f"--nproc must be >= 2 for a collective benchmark, got {args.nproc}")
    try:
        return config_from(BenchConfig, vars(args), sizes_bytes=_sizes(args.sizes, args.nproc))
    except ValueError as e:
        raise UserError(str(e)) from None


def _table(cfg: BenchConfig, rows: list[BenchRow]) -> Table:
    link = "unshaped" if cfg.link_gbit is None else f"{cfg.link_gbit:g} Gbit/s"
    t = Table(title=f"gloo collectives, {cfg.num_ranks} ranks, lab link {link} (bw in Gbit/s)")
    for col in ("collective", "size", "time ms", "algbw", "busbw", "busbw/link"):
        t.add_column(col, justify="left" if col == "collective" else "right", no_wrap=True)
    for r in rows:
        t.add_row(
            r.collective.value,
            format_size(r.size_bytes),
            f"{r.time_us / 1e3:.2f}",
            f"{r.algbw_gbit:.3f}",
            f"{r.busbw_gbit:.3f}",
            "-" if r.link_ratio is None else f"{r.link_ratio:.0%}",
        )
    n = cfg.num_ranks
    t.caption = (
        f"size = full buffer. busbw = algbw x {CollectiveKind.ALL_GATHER.bus_factor(n):.3g} "
        "((n-1)/n: the bytes each rank sends and receives). Both run the engine's gloo "
        "path: a ring of send/recv, n-1 rounds, each rank sending one block to its right "
        "neighbour and receiving one from its left (reduce-scatter adds what it receives)."
    )
    return t


def _verdict(cfg: BenchConfig, rows: list[BenchRow]) -> list[str]:
    if cfg.link_gbit is None:
        return []
    largest = max(cfg.sizes_bytes)
    lines = []
    for r in rows:
        if r.size_bytes == largest and r.link_ratio is not None:
            ok = abs(r.link_ratio - 1) <= TOLERANCE
            lines.append(
                f"{r.collective.value} {format_size(largest)}: busbw {r.busbw_gbit:.3f} Gbit/s "
                f"= {r.link_ratio:.0%} of the link "
                f"({'within' if ok else 'OUTSIDE'} ±{TOLERANCE:.0%})"
            )
    return lines


def _worker_argv(cfg: BenchConfig, master_addr: str, master_port: int, rank: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "overlapscope.bench.worker",
        "--rank",
        str(rank),
        "--num-ranks",
        str(cfg.num_ranks),
        "--master-addr",
        master_addr,
        "--master-port",
        str(master_port),
        "--sizes",
        ",".join(str(s) for s in cfg.sizes_bytes),
        "--iters",
        str(cfg.iters),
        "--warmup",
        str(cfg.warmup),
    ]


def measure(cfg: BenchConfig, log_dir: Path, timeout_s: float, console: Console) -> list[BenchRow]:
    """Run the benchmark in a fresh lab; return one row per (size, collective)."""
    rows: list[BenchRow] = []
    total = len(cfg.sizes_bytes) * len(BENCHED)
    package_root = str(Path(overlapscope.__file__).resolve().parent.parent)
    env = {"PYTHONPATH": package_root}
    with (
        Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress,
        shaped_network(cfg.num_ranks, cfg.link_gbit) as lab,
    ):
        task = progress.add_task("starting ranks", total=total)

        def on_line(line: str) -> None:
            if not line.startswith(TAG):
                return
            msg = json.loads(line[len(TAG) :])
            kind, size = CollectiveKind(msg["collective"]), int(msg["size_bytes"])
            if msg["event"] == "start":
                progress.update(task, description=f"{kind.value} {format_size(size)}")
            else:
                times = np.asarray(msg["times_s"], dtype=np.float64)
                wire = msg.get("wire_tx_bytes")
                wire_t = None if wire is None else tuple(float(b) for b in wire)
                rows.append(summarize(kind, size, cfg.num_ranks, times, cfg.link_gbit, wire_t))
                progress.advance(task)

        codes = lab.run_ranks(
            lambda slot: _worker_argv(cfg, lab.master_addr, lab.master_port, slot.rank),
            env,
            log_dir,
            timeout_s,
            on_rank0_line=on_line,
        )
    if any(codes) or len(rows) != total:
        raise UserError(f"benchmark ranks failed (exit codes {codes}); see the logs in {log_dir}")
    return rows


def to_json(cfg: BenchConfig, rows: list[BenchRow]) -> dict[str, object]:
    shape = None if cfg.link_gbit is None else TbfShape.for_gbit(cfg.link_gbit)
    return {
        "num_ranks": cfg.num_ranks,
        "link_gbit": cfg.link_gbit,
        "tbf": None
        if shape is None
        else {
            "rate_bit_s": shape.rate_bit_s,
            "burst_bytes": shape.burst_bytes,
            "latency_ms": shape.latency_ms,
        },
        "iters": cfg.iters,
        "warmup": cfg.warmup,
        "definitions": DEFINITIONS,
        "rows": [r.to_json() for r in rows],
    }


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse unusable --json / --log-dir paths before the benchmark starts."""
    if args.json and args.json != "-":
        check_file(args.json, "--json")
    if args.log_dir is not None:
        check_dir(args.log_dir, "--log-dir")


def run(args: argparse.Namespace) -> int:
    cfg = _config(args)
    check_outputs(args)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="overlapscope-bench-"))
    # With --json -, stdout carries only the JSON; table and progress go to stderr.
    out = Console(stderr=args.json == "-")
    err = Console(stderr=True)
    rows = measure(cfg, log_dir, args.timeout, err)
    out.print(_table(cfg, rows))
    for line in _verdict(cfg, rows):
        out.print(line)
    if args.json:
        text = json.dumps(to_json(cfg, rows), indent=2)
        if args.json == "-":
            print(text)
        else:
            write_file(args.json, text + "\n", "--json")
            out.print(f"JSON written to {args.json}")
    return 0
