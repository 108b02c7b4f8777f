"""``overlapscope analyze PATH...``: exposed communication, overlap, NCCL wait, bandwidth."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from overlapscope.commands import COMMANDS
from overlapscope.commands.flags import add_dask_args, target
from overlapscope.errors import UserError
from overlapscope.outputs import check_apart, check_dir, check_file, write_file
from overlapscope.perfetto.numbers import parse_numbers
from overlapscope.trace.run.discover import ALLOW_FLAG
from overlapscope.trace.run.ranks import RANK_FROM_NAME_FLAG

if TYPE_CHECKING:
    from overlapscope.analysis.api import RunAnalysis
    from overlapscope.pipeline.plan import Inputs

# The analysis is imported when the command runs (pandas and the rest): ``--help`` and a
# wrong flag cost only the parser.


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "analyze",
        help=COMMANDS["analyze"].help,
        description="Analyse a run directory or Kineto trace files (.json / .json.gz).",
    )
    add_input_args(p)
    p.add_argument("--json", metavar="FILE", help="write the JSON report to FILE ('-': stdout)")
    p.add_argument("--csv", metavar="DIR", type=Path, help="write every table as CSV into DIR")
    p.add_argument("--markdown", metavar="FILE", type=Path, help="write a Markdown report")
    p.add_argument(
        "--hta",
        action="store_true",
        help="also run Holistic Trace Analysis on GPU traces and show its figures (slow)",
    )
    add_perfetto_args(p)
    p.set_defaults(func=run)
    return p


def add_perfetto_args(p: argparse.ArgumentParser) -> None:
    """``--perfetto FILE`` and what it keeps (``--steps``, ``--ranks``)."""
    p.add_argument(
        "--perfetto",
        metavar="FILE",
        type=Path,
        help="write one gzipped Chrome trace of every rank on the aligned clock, annotated "
        "with the analysis, for Perfetto (ui.perfetto.dev) or chrome://tracing",
    )
    p.add_argument(
        "--steps",
        metavar="LIST",
        type=parse_numbers,
        help="with --perfetto: only these profiler steps (e.g. 3 or 2-4,7)",
    )
    p.add_argument(
        "--ranks",
        metavar="LIST",
        type=parse_numbers,
        help="with --perfetto: only these ranks (e.g. 0-7,12)",
    )


def add_input_args(p: argparse.ArgumentParser) -> None:
    """The run to read: PATH..., --allow-missing-ranks, --no-progress (analyze, diagnose)."""
    p.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="a run directory or its trace files; Flight Recorder dumps (its comm_traces/, or "
        "the dumps themselves) are read too",
    )
    p.add_argument(
        ALLOW_FLAG,
        dest="allow_missing_ranks",
        action="store_true",
        help="analyse the readable traces when a rank's trace is missing, corrupt or "
        "duplicated (with a warning), instead of stopping",
    )
    p.add_argument(
        RANK_FROM_NAME_FLAG,
        dest="rank_from_name",
        action="store_true",
        help="take each trace's rank from its file name (rank-<N>) instead of its "
        "distributedInfo (traces without it, or copies renamed by rank)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress display while loading")
    p.add_argument(
        "--no-align",
        action="store_true",
        help="compare the ranks' timestamps as recorded, without estimating each rank's clock "
        "offset from the ends of matched collectives",
    )
    add_dask_args(p)


def inputs_of(args: argparse.Namespace) -> Inputs:
    """The run ``args`` name and the loader's and the clocks' flags."""
    from overlapscope.pipeline.plan import Inputs

    return Inputs(
        tuple(args.paths),
        allow_missing_ranks=args.allow_missing_ranks,
        rank_from_names=getattr(args, "rank_from_name", False),
        align_clocks=not getattr(args, "no_align", False),
        progress=False if args.no_progress else None,
    )


def load_and_analyze(args: argparse.Namespace) -> RunAnalysis:
    """The analysis ``args`` ask for, from the one entry point
    (:func:`~overlapscope.pipeline.run.analyse`): through the per-rank cache on this machine
    or on Dask, or (``--hta``, which reads the whole traces) in this process."""
    from overlapscope.pipeline.run import analyse

    timeline = getattr(args, "csv", None) is not None
    hta = getattr(args, "hta", False)
    return analyse(inputs_of(args), target(args), timeline=timeline, hta=hta).analysis


def write_csv(result: RunAnalysis, out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{out}: cannot create the CSV directory ({e.strerror})") from e
    tables = {
        "ranks": result.ranks,
        "steps": result.steps,
        "units": result.units,
        "collectives": result.collectives,
        "collective_ranks": result.collective_ranks,
        "bound": result.bound,
        "exposed": result.exposed,
        "timeline": result.timeline,
        "idle_gaps": result.idle_gaps,
        "idle_streams": result.idle_streams,
        "host_ops": result.host_ops,
    }
    if result.clocks is not None:
        tables["clock_offsets"] = result.clocks
    if result.path is not None:
        tables["critical_path_steps"] = result.path.steps
        tables["critical_path_links"] = result.path.links
    tables.update(result.tables)  # the registered figures without a field of their own
    for name, df in tables.items():
        write_file(out / f"{name}.csv", df.to_csv(index=False), "--csv")


def run(args: argparse.Namespace) -> int:
    from overlapscope.flight.discover import find_dumps

    dumps, rest = find_dumps(args.paths)
    if dumps:  # Flight Recorder dumps, alone or beside the traces
        from overlapscope.commands import flight_cli

        profile = export_perfetto if args.perfetto else load_and_analyze
        return flight_cli.analyze(args, dumps, rest, profile, write_csv)
    to_stdout = args.json == "-"
    # Every output path is checked before the (long) analysis, so a bad one costs nothing.
    if args.json and not to_stdout:
        check_file(args.json, "--json")
    if args.markdown:
        check_file(args.markdown, "--markdown")
    if args.csv:
        check_dir(args.csv, "--csv")
    check_perfetto(args)
    if args.perfetto and not args.hta:
        result = export_perfetto(args)  # the analysis and the file in one pass
    else:
        result = load_and_analyze(args)
        if args.perfetto:
            export_perfetto(args)  # (through the cache: --hta's analysis reads the traces)
    _write(args, result, to_stdout)
    return 0


def check_perfetto(args: argparse.Namespace) -> None:
    """``--perfetto`` names a file that can be written and is not an input; ``--steps`` and
    ``--ranks`` come with it."""
    for flag in ("steps", "ranks"):
        if getattr(args, flag, None) is not None and not args.perfetto:
            raise UserError(f"--{flag} chooses what --perfetto writes; add --perfetto FILE")
    if args.perfetto:
        check_file(args.perfetto, "--perfetto")
        check_apart(args.perfetto, args.paths, "--perfetto", is_file=True)


def export_perfetto(args: argparse.Namespace) -> RunAnalysis:
    """Write ``--perfetto``'s file, each rank's part in its task (on Dask with ``--dask``);
    the analysis it was made from."""
    from overlapscope.pipeline.perfetto import analyze_and_export

    timeline = getattr(args, "csv", None) is not None
    result, warnings = analyze_and_export(
        inputs_of(args), target(args), args.perfetto, (args.steps, args.ranks), timeline=timeline
    )
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    size = args.perfetto.stat().st_size if args.perfetto.is_file() else 0
    where = f"{args.perfetto} ({size / 1e6:,.1f} MB)"
    print(f"wrote {where}: open it in ui.perfetto.dev or chrome://tracing", file=sys.stderr)
    return result


def _write(args: argparse.Namespace, result: RunAnalysis, to_stdout: bool) -> None:
    import orjson

    from overlapscope.analysis.critical_path.report import report_text
    from overlapscope.analysis.report import markdown, text

    if args.json:
        doc = orjson.dumps(
            result.to_json_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
        )
        if to_stdout:
            sys.stdout.buffer.write(doc + b"\n")
            sys.stdout.flush()
        else:
            write_file(args.json, doc + b"\n", "--json")
    if args.csv:
        write_csv(result, args.csv)
    if args.markdown:
        write_file(args.markdown, markdown(result), "--markdown")
    report = text(result) + report_text(
        result.clocks, result.clocks_applied, result.path, result.clocks_shared_host
    )
    # With --json - the report goes to stderr so stdout stays valid JSON.
    (sys.stderr if to_stdout else sys.stdout).write(report)
