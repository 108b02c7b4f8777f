"""The ``overlapscope`` command: a thin dispatcher over ``overlapscope.commands.<name>``.

Only the command named on the command line is imported (:mod:`overlapscope.commands`):
``overlapscope --help`` imports none, and each command what it needs. Each command module
defines ``add_parser(subparsers) -> argparse.ArgumentParser`` and ``run(args) -> int``.
Errors meant for the user are raised as :class:`UserError` and printed as one line
(``overlapscope: error: ...``) with exit status 2; ``--traceback`` shows the full traceback
of any failure.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import NoReturn

from overlapscope.commands import COMMANDS
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


def _command_module(name: str) -> object | None:
    """The module of command ``name``; None when it is not part of this build."""
    module = f"overlapscope.commands.{COMMANDS[name].module}"
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        return None


def _named(argv: Sequence[str] | None) -> str | None:
    """The command ``argv`` names: its first word that is not an option of ``overlapscope``
    itself (None: ``overlapscope --help``, or a word that is no command)."""
    for word in sys.argv[1:] if argv is None else argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


class OneLineParser(argparse.ArgumentParser):
    """Argument errors as one line naming the flag, and where to look for the fix."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(
    argv: Sequence[str] | None = (), *, every: bool = True
) -> tuple[argparse.ArgumentParser, dict[str, object]]:
    """The parser, with the full parser of every command (``every``), or only of the one
    ``argv`` names: the others are listed with their help line, their modules not imported."""
    parser = OneLineParser(
        prog="overlapscope",
        description="Profile, analyse and visualise communication/compute overlap in "
        "FSDP-style training.",
    )
    parser.add_argument("--traceback", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    named = _named(argv)
    mods: dict[str, object] = {}
    for name, command in COMMANDS.items():
        mod = _command_module(name) if every or name == named else None
        if mod is not None:
            mods[name] = mod
            mod.add_parser(sub)  # type: ignore[attr-defined]
        elif not every:
            sub.add_parser(name, help=command.help, add_help=False)
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


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP stop a command the way Ctrl-C does: its ``finally`` blocks stop
    the processes it started and keep what was written. The handlers the caller had come
    back when the command returns: ``main()`` called in-process (tests, notebooks) leaves the
    process as it found it, so nothing forked from it later inherits ours."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser, _ = build_parser(argv, every=False)
    args = parser.parse_args(argv)
    with _signals_interrupt():
        return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> int:
    """Run the parsed command; a failure meant for the user is one line and exit status 2."""
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
