"""CollectiveKind benchmark: configuration, bus-bandwidth arithmetic and the result table.

Byte counts and factors follow nccl-tests (``doc/PERFORMANCE.md`` there): for a message of
``size_bytes`` (the *full* buffer: the gathered output of all-gather, the input of
reduce-scatter) timed at ``t`` seconds on ``n`` ranks,

    algbw = size_bytes / t
    busbw = algbw * (n - 1) / n        all-gather, reduce-scatter
    busbw = algbw * 2 (n - 1) / n      all-reduce

Both collectives run through the engine's own gloo code path
(``overlapscope/engine/p2p.py``): a ring of ``send``/``recv``. In each of ``n - 1`` rounds
every rank sends one block (``size_bytes / n``) to its right neighbour and receives one from
its left neighbour; the reduce-scatter adds each received partial sum into its own (in 2 MB
pieces). So each rank sends and receives ``size_bytes * (n - 1) / n``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from overlapscope.config import RunConfig
from overlapscope.field_flags import flag, flag_like
from overlapscope.phases import CollectiveKind

# One network namespace, veth pair and process per rank: beyond this a typo, not a lab.
MAX_LAB_RANKS = 64

# Rank 0 of the bench worker prefixes its machine-readable lines with this tag.
TAG = "OVS-BENCH "


# The collectives benchmarked, in the order they run.
BENCHED = (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER)


IMPLEMENTATION = {
    CollectiveKind.ALL_GATHER: (
        "engine p2p ring: n-1 rounds, each sends a block to the right neighbour and "
        "receives one from the left"
    ),
    CollectiveKind.REDUCE_SCATTER: (
        "engine p2p ring: n-1 rounds, each sends a partial-sum chunk to the right neighbour "
        "and adds the one received from the left"
    ),
}


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_size(text: str) -> int:
    """``"16MB"`` -> 16 * 2**20. K/M/G are binary (as in nccl-tests); ``KiB``/``MB`` alike."""
    m = _SIZE_RE.match(text)
    if m is None:
        raise ValueError(f"cannot read size {text!r}; write e.g. 4MB, 512KB or 1048576")
    unit = (m[2] or "").upper()[:1]
    return int(float(m[1]) * _UNITS[unit])


def format_size(num_bytes: int) -> str:
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if num_bytes >= scale and num_bytes % scale == 0:
            return f"{num_bytes // scale}{unit}"
    return f"{num_bytes}B"


def aligned_size(size_bytes: int, num_ranks: int, elem_bytes: int = 4) -> int:
    """Largest size <= ``size_bytes`` that splits into ``num_ranks`` equal float32 chunks
    (ValueError when ``size_bytes`` holds less than one per rank)."""
    unit = num_ranks * elem_bytes
    if num_ranks < 1 or size_bytes < unit:
        raise ValueError(
            f"{size_bytes} bytes is less than one float32 per rank: give at least {unit} bytes "
            f"on {num_ranks} ranks"
        )
    return size_bytes // unit * unit


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """One benchmark; each field but the sizes is the flag of ``bench-collectives`` that sets
    it (``field_flags``)."""

    sizes_bytes: tuple[int, ...]  # (--sizes is text: each size aligned to the ranks)
    num_ranks: int = flag(
        2,
        name="--nproc",
        low=2,
        high=MAX_LAB_RANKS,
        metavar="N",
        help="number of ranks, >= 2",
    )
    link_gbit: float | None = flag_like(
        RunConfig,
        "link_gbit",
        help="shape every rank's link to {metavar} {unit}, a finite number > 0 "
        "(default: unshaped veth)",
    )
    iters: int = flag(5, low=1, high=1 << 20, metavar="K", help="timed iterations per size")
    warmup: int = flag(1, low=0, high=1 << 20, metavar="W", help="untimed iterations first")

    def __post_init__(self) -> None:
        if self.num_ranks < 2:
            raise ValueError(
                f"--nproc must be >= 2 for a collective benchmark, got {self.num_ranks}"
            )
        if self.iters < 1:
            raise ValueError(f"--iters must be >= 1, got {self.iters}")
        if self.warmup < 0:
            raise ValueError(f"--warmup must be >= 0, got {self.warmup}")
        if not self.sizes_bytes:
            raise ValueError("--sizes must name at least one size")
        bad = [s for s in self.sizes_bytes if s <= 0]
        if bad:
            raise ValueError(f"--sizes: {bad[0]} bytes; every size must be > 0")
        if self.link_gbit is not None and not (
            math.isfinite(self.link_gbit) and self.link_gbit > 0
        ):
            raise ValueError(f"--link-gbit must be a finite number > 0, got {self.link_gbit}")


@dataclass(frozen=True, slots=True)
class BenchRow:
    """One (collective, size) measurement; times are medians over ``iters``, max over ranks."""

    collective: CollectiveKind
    size_bytes: int
    num_ranks: int
    iters: int
    time_us: float
    time_min_us: float
    time_max_us: float
    algbw_gbit: float
    busbw_gbit: float
    link_ratio: float | None  # busbw / link rate; None when unshaped
    # Bytes each rank's lab interface transmitted per iteration (frames, headers and the
    # iteration's barrier included); None outside the lab.
    wire_tx_bytes: tuple[float, ...] | None = None

    @property
    def payload_bytes_per_rank(self) -> float:
        """What each rank must send in a ring: ``size_bytes * (n - 1) / n``."""
        return self.size_bytes * (self.num_ranks - 1) / self.num_ranks

    def to_json(self) -> dict[str, object]:
        return {
            "collective": self.collective.value,
            "implementation": IMPLEMENTATION[self.collective],
            "size_bytes": self.size_bytes,
            "num_ranks": self.num_ranks,
            "iters": self.iters,
            "time_us_median": self.time_us,
            "time_us_min": self.time_min_us,
            "time_us_max": self.time_max_us,
            "algbw_gbit_s": self.algbw_gbit,
            "busbw_gbit_s": self.busbw_gbit,
            "busbw_factor": self.collective.bus_factor(self.num_ranks),
            "busbw_over_link": self.link_ratio,
            "payload_bytes_per_rank": self.payload_bytes_per_rank,
            "wire_tx_bytes_per_rank": None
            if self.wire_tx_bytes is None
            else list(self.wire_tx_bytes),
        }


def summarize(
    collective: CollectiveKind,
    size_bytes: int,
    num_ranks: int,
    times_s: np.ndarray,
    link_gbit: float | None,
    wire_tx_bytes: tuple[float, ...] | None = None,
) -> BenchRow:
    """Turn per-iteration times (seconds, already max over ranks) into one row."""
    t = float(np.median(times_s))
    algbw = size_bytes * 8 / t / 1e9
    busbw = algbw * collective.bus_factor(num_ranks)
    return BenchRow(
        collective=collective,
        size_bytes=size_bytes,
        num_ranks=num_ranks,
        iters=len(times_s),
        time_us=t * 1e6,
        time_min_us=float(times_s.min()) * 1e6,
        time_max_us=float(times_s.max()) * 1e6,
        algbw_gbit=algbw,
        busbw_gbit=busbw,
        link_ratio=None if link_gbit is None else busbw / link_gbit,
        wire_tx_bytes=wire_tx_bytes,
    )
