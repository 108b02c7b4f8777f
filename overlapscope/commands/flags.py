"""Flag value parsers shared by the subcommands: a bad value is refused while parsing."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from overlapscope.errors import UserError

if TYPE_CHECKING:
    from overlapscope.cluster.run import DaskTarget

# argparse ``type=`` converters: a bad value is rejected while parsing, before anything is
# created, as one line ``argument --FLAG: <message>``.


def int_at_least(low: int, hint: str = "", high: int | None = None) -> Callable[[str], int]:
    """An integer >= ``low`` (and <= ``high``); ``hint`` (e.g. what 0 means) is added to the
    error."""
    span = f">= {low}" if high is None else f"from {low} to {high}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not an integer; give an integer {span}{hint}"
            ) from None
        if value < low:
            raise argparse.ArgumentTypeError(
                f"{value} is too small: give an integer >= {low}{hint}"
            )
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{value} is too large: give an integer <= {high}")
        return value

    parse.__name__ = f"integer {span}"
    return parse


# Upper bounds: far beyond anything a local run can hold, low enough that a typo (an extra
# zero or three) is refused in one line instead of exhausting memory or processes.
MAX_RANKS = 1024
MAX_WIDTH = 1 << 16


def positive_float(text: str) -> float:
    """A finite number > 0 (no nan, no inf: they would not survive JSON)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number; give a finite number > 0"
        ) from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number > 0")
    return value


def add_dask_args(p: argparse.ArgumentParser) -> None:
    """``--dask ADDRESS|local`` and ``--cache DIR`` (analyze, diagnose, dashboard)."""
    p.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="parse each rank file in a task on the Dask scheduler at ADDRESS "
        "(tcp://HOST:PORT), or 'local' for a cluster on this machine (needs overlapscope[cluster])",
    )
    p.add_argument(
        "--cache",
        metavar="DIR",
        type=Path,
        help="with --dask: where the parsed ranks and their summaries are cached "
        "(default: ~/.cache/overlapscope/ranks)",
    )


def dask_target(args: argparse.Namespace) -> DaskTarget | None:
    """The ``--dask`` scheduler and ``--cache`` of ``args``; None without ``--dask``
    (``--cache`` alone is refused: it means nothing without it)."""
    if getattr(args, "dask", None):
        from overlapscope.cluster.run import DaskTarget

        return DaskTarget(args.dask, args.cache)
    if getattr(args, "cache", None):
        raise UserError("--cache is used with --dask; add --dask local or --dask ADDRESS")
    return None
