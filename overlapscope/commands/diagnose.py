"""``overlapscope diagnose PATH``: findings ranked by the time at stake, with what to try."""

from __future__ import annotations

import argparse
import sys

from overlapscope.analysis.findings.registry import no_findings_sentence
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
    result = load_and_analyze(args)
    out = sys.stdout
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if not result.findings:
        out.write(no_findings_sentence() + "\n")
        return 0
    for i, f in enumerate(result.findings, 1):
        where = (
            f" (rank {f.rank})" if f.rank is not None and f"rank {f.rank}" not in f.title else ""
        )
        out.write(f"{i}. {f.title}{where}: {f.stake_us:,.0f} µs/step at stake\n")
        out.write(f"   evidence: {f.summary}\n")
        out.write(f"   try: {f.change}\n")
    return 0
