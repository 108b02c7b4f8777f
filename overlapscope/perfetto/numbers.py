"""Lists of numbers as ``--steps`` and ``--ranks`` take them (``2,3``, ``0-7,12``): parsed
without the analysis' imports, so that ``--help`` and a wrong flag cost only the parser."""

from __future__ import annotations

import argparse

# A range wider than this is a typo (ranks and steps of any real run are far fewer).
MAX_SPAN = 1 << 20


def parse_numbers(text: str) -> tuple[int, ...]:
    """``"0-3,8"`` -> ``(0, 1, 2, 3, 8)`` (sorted, each once); an argparse ``type=``."""
    out: set[int] = set()
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            a = int(lo)
            b = int(hi) if dash else a
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: give numbers and ranges such as 2,3 or 0-7,12"
            ) from None
        if a < 0 or b < a or b - a >= MAX_SPAN:
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r}: give a number >= 0 or a range LOW-HIGH with LOW <= HIGH"
            )
        out.update(range(a, b + 1))
    return tuple(sorted(out))
