"""What several runs of one workload calibrate together (``whatif --contention-from``).

One run's compute carries that run's luck: on a shared or power-managed machine the same
units compute 10 % faster in one run than in the next, and a prediction from that run carries
the deviation whatever its schedule. Runs of the same workload under other policies or links
tell two things the one run cannot:

- the compute slow-down from communication, α, fitted between runs whose busy fractions
  differ (:func:`~overlapscope.sim.contention.fit_contention_across`), from the runs at the
  source's link rate;
- the machine's compute speed. A unit's forward compute is the same work in every run; with
  α taken out (``dur / (1 + α × busy_fraction)``, which matters only under forward
  prefetch) it measures how fast the machine ran. The source's compute is scaled to the
  median forward compute of the source and the given runs at the source's link rate.

Only runs at the source's rate calibrate the speed, also for a prediction at another rate.
Scaling instead to the forward compute of runs at the target's rate was tried on two idle
sweeps: predictions across rates got worse (median 1.6 → 2.6 %, docs/BENCHMARKS.md). Forward
compute is 6-20 % slower at 0.25 than at 1 Gbit/s on this VM, but most of that is compute
right after the long wait for an all-gather (docs/WHATIF.md, Limits), not a slower machine:
backward compute, which waits less, does not follow it.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from overlapscope.sim.calibrate import Calibration, ComputeTimes
from overlapscope.sim.contention import fit_contention_across
from overlapscope.trace.names import ROOT_UNIT


@dataclass(frozen=True, slots=True)
class Pooled:
    """What the runs given calibrate: α, and the factor on the source's compute."""

    contention: float
    speed_scale: float  # the source's base compute durations are multiplied by this
    num_runs: int  # the runs at the source's link rate, the source included
    speed_runs: int  # how many of them have forward compute (the speed is their median)


def contention_across(calibs: Sequence[Calibration]) -> float:
    """The compute slow-down from communication fitted across runs of one workload (their
    busy fractions differ where one run's do not: overlapscope/sim/contention.py)."""
    if not calibs:
        return 0.0
    return fit_contention_across([c.compute_rows for c in calibs], calibs[0].unit_full_bytes)


def forward_us(calib: Calibration, contention: float) -> float:
    """Mean base duration of a unit's forward compute: the measured one with ``contention``
    taken out of the part that overlapped a transfer."""
    rows = calib.compute_rows
    units = [u for u in calib.step_model.units if u != ROOT_UNIT]
    rows = rows[(rows["phase"] == "fwd") & rows["unit"].isin(units)]
    base = rows["dur_us"] / (1.0 + contention * rows["busy_frac"])
    return float(base.mean()) if len(base) else float("nan")


def at_speed(calib: Calibration, scale: float) -> Calibration:
    """The calibration with every base compute duration multiplied by ``scale``."""

    def times(t: ComputeTimes) -> ComputeTimes:
        return {r: {key: us * scale for key, us in per.items()} for r, per in t.items()}

    ranks = {
        r: dataclasses.replace(t, compute_us={key: us * scale for key, us in t.compute_us.items()})
        for r, t in calib.ranks.items()
    }
    return dataclasses.replace(
        calib, ranks=ranks, step_compute_us=tuple(times(t) for t in calib.step_compute_us)
    )


def pool_runs(source: Calibration, others: Sequence[Calibration]) -> Pooled:
    """α and the compute speed of ``source``, calibrated across it and those of ``others``
    (runs of the same workload) at its link rate; the module docstring says how."""
    link = source.measured.link_gbit
    pool = [source, *(c for c in others if c.measured.link_gbit == link)]
    alpha = contention_across(pool)
    speeds = [f for f in (forward_us(c, alpha) for c in pool) if math.isfinite(f) and f > 0]
    own = forward_us(source, alpha)
    ok = math.isfinite(own) and own > 0 and bool(speeds)
    scale = statistics.median(speeds) / own if ok else 1.0
    return Pooled(
        contention=alpha,
        speed_scale=scale,
        num_runs=len(pool),
        speed_runs=len(speeds) if ok else 0,
    )
