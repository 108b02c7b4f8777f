"""``analyze`` and ``diagnose`` on a run with Flight Recorder dumps (overlapscope/flight/):
the dumps alone, or beside the profiler traces of the same job (then both reports, the
dumps' collectives joined to the trace's units).

``analyze``: the profiler report (if traces), then the flight report; ``--json`` adds a
``flight`` object to the report (or is the flight object alone); ``--csv`` adds
``flight_collectives.csv``, ``flight_ranks.csv`` and ``flight_clocks.csv``. ``diagnose``:
every finding, hangs first.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from overlapscope.errors import UserError
from overlapscope.outputs import check_dir, check_file, write_file

if TYPE_CHECKING:
    from overlapscope.analysis.api import RunAnalysis
    from overlapscope.flight.api import FlightReport


def _shared_host(paths: list[Path]) -> str | None:
    from overlapscope.analysis.clocks.alignment import shared_host
    from overlapscope.manifest import read_manifest

    dirs = {p.parent.parent if p.parent.name == "comm_traces" else p.parent for p in paths}
    hosts = {shared_host(read_manifest(d)) for d in dirs}
    return hosts.pop() if len(hosts) == 1 else None


# the profiler traces' analysis (commands/analyze.py's, with --perfetto's file if asked)
Profile = Callable[[argparse.Namespace], "RunAnalysis"]


def _both(args: argparse.Namespace, dumps: list[Path], rest: list[Path], profile: Profile
          ) -> tuple[RunAnalysis | None, FlightReport]:  # fmt: skip
    from overlapscope.flight.api import analyze_dumps

    result = None
    if rest:
        sub = copy.copy(args)
        sub.paths = rest
        result = profile(sub)
    report = analyze_dumps(
        dumps, align=not getattr(args, "no_align", False), shared_host=_shared_host(dumps),
        trace_collectives=result.collectives if result is not None else None,
    )  # fmt: skip
    return result, report


def analyze(
    args: argparse.Namespace, dumps: list[Path], rest: list[Path], profile: Profile,
    write_csv: Callable[[RunAnalysis, Path], None],
) -> int:  # fmt: skip
    import orjson

    from overlapscope.flight.report import text

    to_stdout = args.json == "-"
    if args.json and not to_stdout:
        check_file(args.json, "--json")
    if args.csv:
        check_dir(args.csv, "--csv")
    for flag in ("markdown", "perfetto"):
        if getattr(args, flag, None) and not rest:
            raise UserError(f"--{flag} reports profiler traces; these paths hold only "
                            "Flight Recorder dumps: leave it out or add the traces")  # fmt: skip
        if getattr(args, flag, None):
            check_file(getattr(args, flag), f"--{flag}")
    result, report = _both(args, dumps, rest, profile)
    if args.json:
        doc: dict[str, Any] = result.to_json_dict() if result is not None else {}
        doc["flight"] = report.to_json_dict()
        data = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
        if to_stdout:
            sys.stdout.buffer.write(data + b"\n")
            sys.stdout.flush()
        else:
            write_file(args.json, data + b"\n", "--json")
    if args.csv:
        if result is not None:
            write_csv(result, args.csv)
        else:
            args.csv.mkdir(parents=True, exist_ok=True)
        for name, df in report.tables().items():
            write_file(args.csv / f"{name}.csv", df.to_csv(index=False), "--csv")
    if args.markdown and result is not None:
        from overlapscope.analysis.report import markdown

        write_file(args.markdown, markdown(result), "--markdown")
    out = sys.stderr if to_stdout else sys.stdout
    if result is not None:
        from overlapscope.analysis.report import text as run_text

        out.write(run_text(result) + "\n")
    out.write(text(report))
    return 0


def diagnose(
    args: argparse.Namespace, dumps: list[Path], rest: list[Path], profile: Profile
) -> int:
    from overlapscope.analysis.findings import FindingKind
    from overlapscope.flight.report import finding_lines

    result, report = _both(args, dumps, rest, profile)
    for w in (*(result.warnings if result is not None else ()), *report.warnings):
        print(f"warning: {w}", file=sys.stderr)
    found = [*(result.findings if result is not None else ()), *report.findings]
    hangs = [f for f in found if f.kind is FindingKind.COLLECTIVE_HANG]
    rest_found = sorted((f for f in found if f not in hangs), key=lambda f: -f.stake_us)
    if not found:
        from overlapscope.analysis.findings.registry import no_findings_sentence

        sys.stdout.write("no findings in the Flight Recorder dumps (no hang, late issuer or "
                         f"peer wait); in the traces, {no_findings_sentence()}\n")  # fmt: skip
        return 0
    sys.stdout.write(finding_lines([*hangs, *rest_found]))
    return 0
