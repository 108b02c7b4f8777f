"""The ``overlapscope`` command: a thin dispatcher over ``overlapscope.commands.<name>``.

Each command module defines ``add_parser(subparsers) -> argparse.ArgumentParser`` and
``run(args) -> int``. Errors meant for the user are raised as :class:`UserError` and printed
as one line (``overlapscope: error: ...``) with exit status 2; ``--traceback`` shows the
full traceback of any failure.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from overlapscope.errors import UserError

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


def main(argv: Sequence[str] | None = None) -> int:
    parser, _ = build_parser()
    args = parser.parse_args(argv)
    try:
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
    except KeyboardInterrupt:
        print("overlapscope: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
