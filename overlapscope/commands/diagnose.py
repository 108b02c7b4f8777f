"""``overlapscope diagnose PATH``: findings ranked by the time at stake, with what to try."""

from __future__ import annotations

import argparse
import sys

from overlapscope.analysis.findings.registry import no_findings_sentence
from overlapscope.analysis.findings.text import finding_lines
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
    out.write(f"framework: {result.summary.framework.words}\n")
    if not result.findings:
        out.write(no_findings_sentence() + "\n")
        return 0
    for i, f in enumerate(result.findings, 1):
        out.write("".join(f"{line}\n" for line in finding_lines(i, f)))
    return 0
