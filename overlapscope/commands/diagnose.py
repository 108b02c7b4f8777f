"""``overlapscope diagnose PATH``: findings ranked by the time at stake, with what to try."""

from __future__ import annotations

import argparse
import sys

from overlapscope.commands import COMMANDS
from overlapscope.commands.analyze import add_input_args, load_and_analyze


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "diagnose",
        help=COMMANDS["diagnose"].help,
        description="Findings ranked by time at stake, each with evidence and the change to try.",
    )
    add_input_args(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from overlapscope.flight.discover import find_dumps

    dumps, rest = find_dumps(args.paths)
    if dumps:  # Flight Recorder dumps, alone or beside the traces
        from overlapscope.commands import flight_cli

        return flight_cli.diagnose(args, dumps, rest, load_and_analyze)
    result = load_and_analyze(args)
    out = sys.stdout
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if not result.findings:
        out.write(
            "no findings: no exposed all-gathers, limiter time, straggler or slow link above "
            "1% of the step time\n"
        )
        return 0
    for i, f in enumerate(result.findings, 1):
        where = (
            f" (rank {f.rank})" if f.rank is not None and f"rank {f.rank}" not in f.title else ""
        )
        out.write(f"{i}. {f.title}{where}: {f.stake_us:,.0f} µs/step at stake\n")
        out.write(f"   evidence: {f.evidence}\n")
        out.write(f"   try: {f.change}\n")
    return 0
