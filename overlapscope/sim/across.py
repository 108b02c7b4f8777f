"""What several runs of one workload calibrate together (``whatif --contention-from``).

One run's compute carries that run's luck: on a shared or power-managed machine the same
units compute 10 % faster in one run than in the next, and a prediction from that run carries
the deviation whatever its schedule. Runs of the same workload under other policies or links
tell three things the one run cannot:

- the compute slow-down from communication, α, fitted between runs whose busy fractions
  differ (:func:`~overlapscope.sim.contention.fit_contention_across`), from the runs at the
  source's link rate;
- the machine's compute speed. A unit's forward compute is the same work in every run; with
  α taken out (``dur / (1 + α × busy_fraction)``, which matters only under forward
  prefetch) it measures how fast the machine ran. The source's compute is scaled to the
  median forward compute of the source and the given runs at the source's link rate;
- for a prediction at another link rate, the forward compute at that rate. A slower link
  leaves each rank idle longer before every forward unit (it waits for the unit's
  all-gather), and compute right after a long idle is slower on some machines: on this VM a
  unit's forward compute is 6-20 % slower at 0.25 than at 1 Gbit/s (docs/WHATIF.md, Limits).
  Forward waits the same way under every backward policy, so the given runs at the target's
  rate (with the scenario's forward prefetch) measure it: the source's forward compute is
  scaled to their median. Backward is not: how long a rank idles before a backward unit is
  what the policy changes. Scaling all the compute to those runs' forward speed was tried
  and made predictions across rates worse (median 1.6 → 2.6 %, docs/BENCHMARKS.md).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from overlapscope.phases import Phase
from overlapscope.sim.calibrate import Calibration, ComputeTimes
from overlapscope.sim.contention import fit_contention_across
from overlapscope.sim.schedule import Scenario
from overlapscope.trace.naming.ranges import ROOT_UNIT


@dataclass(frozen=True, slots=True)
class Pooled:
    """What the runs given calibrate: α, and the factors on the source's compute."""

    contention: float
    speed_scale: float  # the source's base compute durations are multiplied by this
    num_runs: int  # the runs at the source's link rate, the source included
    speed_runs: int  # how many of them have forward compute (the speed is their median)
    forward_scale: float = 1.0  # and its forward compute by this too (another link rate)
    forward_runs: int = 0  # the runs at the target's rate whose median that is
    unused: tuple[int, ...] = ()  # the positions in ``others`` of the runs used for neither


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
    rows = rows[(rows["phase"] == Phase.FWD.value) & rows["unit"].isin(units)]
    base = rows["dur_us"] / (1.0 + contention * rows["busy_frac"])
    return float(base.mean()) if len(base) else float("nan")


def at_speed(calib: Calibration, scale: float, forward_scale: float = 1.0) -> Calibration:
    """The calibration with every base compute duration multiplied by ``scale``, and the
    forward ones by ``forward_scale`` too."""

    def scaled(per: dict[tuple[Phase, str, int], float]) -> dict[tuple[Phase, str, int], float]:
        return {
            key: us * scale * (forward_scale if key[0] is Phase.FWD else 1.0)
            for key, us in per.items()
        }

    def times(t: ComputeTimes) -> ComputeTimes:
        return {r: scaled(per) for r, per in t.items()}

    ranks = {r: dataclasses.replace(t, compute_us=scaled(t.compute_us)) for r, t in calib.ranks.items()}  # fmt: skip
    return dataclasses.replace(
        calib, ranks=ranks, step_compute_us=tuple(times(t) for t in calib.step_compute_us)
    )


def _forwards(runs: Sequence[Calibration], contention: float) -> list[float]:
    """Each run's mean base forward compute per unit, where it has any."""
    return [f for f in (forward_us(c, contention) for c in runs) if math.isfinite(f) and f > 0]


def pool_runs(
    source: Calibration, others: Sequence[Calibration], scenario: Scenario | None = None
) -> Pooled:
    """α, the compute speed of ``source`` and (``scenario`` at another link rate) its forward
    speed there, calibrated across ``source`` and ``others``, runs of the same workload; the
    module docstring says how."""
    link = source.measured.link_gbit
    pool = [source, *(c for c in others if c.measured.link_gbit == link)]
    alpha = contention_across(pool)
    speeds = _forwards(pool, alpha)
    own = forward_us(source, alpha)
    ok = math.isfinite(own) and own > 0 and bool(speeds)
    scale = statistics.median(speeds) / own if ok else 1.0
    there: list[Calibration] = []
    if scenario is not None and scenario.link_gbit not in (None, link):
        there = [
            c
            for c in others
            if c.measured.link_gbit == scenario.link_gbit
            and c.measured.scenario.forward_prefetch == scenario.forward_prefetch
        ]
    used = {id(c) for c in (*pool, *there)}
    fwd = _forwards(there, alpha)
    forward_scale = statistics.median(fwd) / (own * scale) if ok and fwd else 1.0
    return Pooled(
        contention=alpha,
        speed_scale=scale,
        num_runs=len(pool),
        speed_runs=len(speeds) if ok else 0,
        forward_scale=forward_scale,
        forward_runs=len(fwd) if ok else 0,
        unused=tuple(i for i, c in enumerate(others) if id(c) not in used),
    )
