"""The ``overlapscope`` command: a thin dispatcher over ``overlapscope.commands.<name>``.

Each command module defines ``add_parser(subparsers) -> argparse.ArgumentParser`` and
``run(args) -> int``. Errors meant for the user are raised as :class:`UserError` and printed
as one line (``overlapscope: error: ...``) with exit status 2; ``--traceback`` shows the
full traceback of any failure.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import NoReturn

from overlapscope.errors import Interrupted, UserError
from overlapscope.outputs import check_apart

# Where commands keep what they read and what they write (argparse dests); no output may be,
# hold or lie inside an input, whatever the command.
INPUT_DESTS = ("paths", "run_dir")
OUTPUT_FLAGS = {
    "json": "--json",
    "markdown": "--markdown",
    "csv": "--csv",
    "out": "--out",
    "trace": "--trace",
    "log_dir": "--log-dir",
}
FILE_DESTS = ("json", "markdown")

# command name -> module under overlapscope.commands
COMMANDS: dict[str, str] = {
    "run": "run",
    "analyze": "analyze",
    "diagnose": "diagnose",
    "dashboard": "dashboard",
    "sweep": "sweep",
    "bench-collectives": "bench_collectives",
    "whatif": "whatif",
}


def _available() -> dict[str, object]:
    mods: dict[str, object] = {}
    for name, mod in COMMANDS.items():
        try:
            mods[name] = importlib.import_module(f"overlapscope.commands.{mod}")
        except ModuleNotFoundError as e:
            # A command whose module is not part of this build is simply not offered.
            if e.name != f"overlapscope.commands.{mod}":
                raise
    return mods


class OneLineParser(argparse.ArgumentParser):
    """Argument errors as one line naming the flag, and where to look for the fix."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, object]]:
    parser = OneLineParser(
        prog="overlapscope",
        description="Profile, analyse and visualise communication/compute overlap in "
        "FSDP-style training.",
    )
    parser.add_argument("--traceback", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    mods = _available()
    for mod in mods.values():
        mod.add_parser(sub)  # type: ignore[attr-defined]
    return parser, mods


def check_outputs_apart(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output path that is (or holds, or is inside) an input."""
    inputs: list[object] = []
    for dest in INPUT_DESTS:
        value = getattr(args, dest, None)
        inputs.extend(value if isinstance(value, list) else [] if value is None else [value])
    for dest, flag in OUTPUT_FLAGS.items():
        out = getattr(args, dest, None)
        if out is not None and str(out) not in ("", "-"):
            check_apart(out, [str(i) for i in inputs], flag, is_file=dest in FILE_DESTS)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def _signals_interrupt() -> None:
    """SIGTERM and SIGHUP stop a command the way Ctrl-C does: its ``finally`` blocks stop
    the processes it started and keep what was written."""
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, _interrupt)


def main(argv: Sequence[str] | None = None) -> int:
    parser, _ = build_parser()
    args = parser.parse_args(argv)
    _signals_interrupt()
    try:
        check_outputs_apart(args)
        return int(args.func(args))
    except UserError as e:
        if args.traceback:
            raise
        print(f"overlapscope: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        # A file system failure no check foresaw (disk full, permissions changed mid-run):
        # still one line, naming the file.
        if args.traceback:
            raise
        where = f"{e.filename}: " if e.filename else ""
        print(
            f"overlapscope: error: {where}{e.strerror or e}; check the path and free space "
            "(--traceback for details)",
            file=sys.stderr,
        )
        return 2
    except MemoryError:
        # Flags are bounded and inputs validated; should a file still not fit, one line.
        if args.traceback:
            raise
        print(
            "overlapscope: error: out of memory; give a smaller input or fewer ranks "
            "(--traceback for details)",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt as e:
        signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
        print(f"overlapscope: interrupted ({signal.Signals(signum).name})", file=sys.stderr)
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
