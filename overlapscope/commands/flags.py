"""Flag value parsers shared by the subcommands: a bad value is refused while parsing."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from overlapscope.pipeline.run import Target

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
    """``--dask ADDRESS|local``, ``--cache DIR`` and ``--no-cache`` (analyze, diagnose,
    dashboard)."""
    p.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="run the per-rank work in tasks on the Dask scheduler at ADDRESS "
        "(tcp://HOST:PORT), or 'local' for a cluster on this machine (needs overlapscope[cluster])",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--cache",
        metavar="DIR",
        type=Path,
        help="where each rank's parse and figures are cached, so that a re-analysis reads "
        "them back (default: $OVERLAPSCOPE_CACHE, else ~/.cache/overlapscope)",
    )
    where.add_argument(
        "--no-cache", action="store_true", help="keep nothing: analyse in a temporary cache"
    )


def target(args: argparse.Namespace) -> Target:
    """Where ``args`` run the analysis' tasks (``--dask``) and keep them (``--cache``,
    ``--no-cache``)."""
    from overlapscope.pipeline.run import Target

    return Target(getattr(args, "dask", None), getattr(args, "cache", None), args.no_cache)
