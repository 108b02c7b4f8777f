"""The link: one model per collective kind, and how long each collective holds the queue.

``LinkModel`` (``transfer_us = latency + bytes × busbw factor / busbw``) is fitted to the
fastest rank's duration of every matched collective (the wire, :func:`fit_link`); the replay
uses each measured collective's *lane time* (:func:`lane_time_us`), and on another link only
its wire part scales (``rescale.rescale_lane_time``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.errors import UserError
from overlapscope.phases import CollectiveKind, Phase

TCP_EFFICIENCY = 0.956  # TCP payload per tbf-counted byte at MTU 1500 (docs/LAB.md)


def bus_factor(kind: str, world_size: int) -> float:
    """nccl-tests' bus-bandwidth factor (busbw = algbw × factor) of a collective kind's value;
    written once, in :meth:`CollectiveKind.bus_factor`."""
    known = {k.value for k in CollectiveKind}
    return CollectiveKind(kind if kind in known else "other").bus_factor(world_size)


@dataclass(frozen=True, slots=True)
class LinkModel:
    """``transfer_us = latency_us + bytes × factor / busbw_bytes_per_us``."""

    kind: str
    latency_us: float
    busbw_bytes_per_us: float
    factor: float
    num_samples: int

    def transfer_us(self, nbytes: int, bandwidth_scale: float = 1.0) -> float:
        return self.latency_us + nbytes * self.factor / (self.busbw_bytes_per_us * bandwidth_scale)

    def with_busbw(self, busbw_bytes_per_us: float) -> LinkModel:
        return LinkModel(
            self.kind, self.latency_us, busbw_bytes_per_us, self.factor, self.num_samples
        )


def lane_time_us(coll: pd.DataFrame) -> pd.Series:
    """How long each collective held its group's queue: from the last rank's start to the
    last rank's end.

    The analysis' ``transfer_us`` is the fastest rank's duration (right for bandwidth).
    The replay needs more: a collective is done, and the next one on the queue can start,
    only when every rank has finished it, and ranks finish apart (over the 1,344
    collectives of the what-if validation's 24 runs, the span exceeds the fastest
    duration by 0.4 ms median, 1.4 ms mean, 3.9 ms at the 90th percentile). With the
    fastest duration the replay of each run under its own configuration came out 1.3-5.4%
    short; with the span, 3.1% short to 1.0% long (docs/BENCHMARKS.md, what-if). Falls
    back to the fastest duration where the span is not positive (one rank seen)."""
    last_start = coll["start_us"] + coll["straggler_lag_us"].fillna(0.0)
    span = coll["end_us"] - last_start
    return span.where(span > 0, coll["transfer_us"])


def per_collective(
    coll: pd.DataFrame, column: str = "transfer_us", *, keep_zero: bool = False
) -> dict[tuple[str, Phase], float]:
    """Mean of ``column`` per (unit, phase); non-positive means dropped unless ``keep_zero``
    (a lag of 0 is a measurement; a lane time of 0 is not)."""
    mean = coll.groupby(["unit", "phase"])[column].mean()
    return {
        (str(u), Phase(str(ph))): float(t)
        for (u, ph), t in mean.items()
        if t > 0 or (keep_zero and t == 0)
    }


MIN_SIZE_SPAN = 4.0  # fit a latency only over message sizes spanning at least this factor


def fit_link(kind: str, rows: pd.DataFrame, world_size: int) -> LinkModel:
    f = bus_factor(kind, world_size)
    rows = rows[(rows["bytes"] > 0) & (rows["transfer_us"] > 0)]
    if rows.empty:
        raise UserError(f"no measured {kind} collectives with sizes to fit a link model")
    x = rows["bytes"].to_numpy(dtype=float) * f
    y = rows["transfer_us"].to_numpy(dtype=float)
    # Through the origin (keeps the total measured time) unless the sizes span enough to
    # tell a fixed cost from a per-byte one: an FSDP run has one or two unit sizes, whose
    # noisy times can fit any intercept (2.2 and 3.2 MB gave 0-5 ms and 1.0-2.2 Gbit/s
    # on one 1 Gbit/s link), and a wrong intercept is multiplied when the rate is scaled.
    latency, inv_bw = 0.0, float(y.sum() / x.sum())
    if x.max() >= MIN_SIZE_SPAN * x.min():
        slope, icpt = np.polyfit(x, y, 1)
        if slope > 0 and 0 <= icpt < y.min():
            latency, inv_bw = float(icpt), float(slope)
    return LinkModel(kind, latency, 1.0 / inv_bw, f, len(rows))
