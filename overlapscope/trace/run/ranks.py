"""Which rank each trace is, and whether the traces make one run (checked once, here).

Refused with a one-line :class:`~overlapscope.errors.UserError`: two traces of one rank,
traces reporting different world sizes (the other checks that traces are one job's:
:mod:`overlapscope.trace.run.same_run`). Missing ranks are summarised as ranges (``127 of 128 ranks missing: 1-127``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from overlapscope.errors import UserError

if TYPE_CHECKING:  # (the flag's name is read by the CLI's parser: no trace reader for it)
    from overlapscope.trace.read.parse import RawTrace

RANK_FROM_NAME_FLAG = "--rank-from-name"
_RANK_NAME_RE = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def rank_from_name(path: Path) -> int | None:
    """The rank a file name carries (``rank-3.pt.trace.json.gz``, ``rank_3``, ``rank3``)."""
    m = _RANK_NAME_RE.search(path.name)
    return int(m.group(1)) if m else None


def rank_ranges(ranks: Sequence[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3, 7"`` (sorted input)."""
    parts: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ", ".join(parts)


def missing_ranks(present: Sequence[int], world: int) -> tuple[int, str]:
    """(how many of ``range(world)`` are not in ``present``, their ranges), without building
    the range (a corrupt world size must not exhaust memory)."""
    ranks = sorted({r for r in present if 0 <= r < world})
    gaps: list[str] = []
    prev = -1
    for r in [*ranks, world]:
        if r > prev + 1:
            gaps.append(str(prev + 1) if r == prev + 2 else f"{prev + 1}-{r - 1}")
        prev = r
    return world - len(ranks), ", ".join(gaps)


def duplicate_error(a: Path, b: Path, rank: int, allow_flag: str) -> UserError:
    return UserError(
        f"{a} and {b}: two traces of rank {rank}; pass the traces of one run, or "
        f"{RANK_FROM_NAME_FLAG} when the file names carry the ranks (rank-<N>), or "
        f"{allow_flag} to keep the first"
    )


def check_one_run(raws: Sequence[RawTrace]) -> None:
    """Refuse traces that report different world sizes (the other checks of one run:
    :mod:`overlapscope.trace.run.same_run`)."""
    sizes = {r.world_size for r in raws if r.world_size is not None}
    if len(sizes) > 1:
        listing = ", ".join(f"{r.path.name}: {r.world_size}" for r in raws)
        raise UserError(
            f"mixed runs: traces report different world sizes ({listing}); "
            "pass the traces of one run"
        )
