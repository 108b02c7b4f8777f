"""The calibrated run under a scenario's network: its link models rescaled, each
collective's measured lane time with only its wire part rescaled, and the compute slow-down
α at the new rate (``predict_from`` replays with all three)."""

from __future__ import annotations

from overlapscope.phases import Phase
from overlapscope.sim.calibrate import TCP_EFFICIENCY, Calibration, LinkModel, bus_factor
from overlapscope.sim.schedule import Collective, Scenario

GBIT_BYTES_PER_US = 1e9 / 8 / 1e6  # 1 Gbit/s in bytes per µs


def scaled_links(calib: Calibration, scenario: Scenario) -> dict[str, LinkModel]:
    """The link models under the scenario's network.

    ``link_gbit`` from a shaped run scales bus bandwidth by the rate ratio (keeping the
    measured efficiency); from an unshaped run it caps bus bandwidth at the shaped link's
    TCP goodput (``R`` Gbit/s × 0.956). ``bandwidth_scale`` multiplies it.
    """
    out = {}
    for kind, lm in calib.links.items():
        bw = lm.busbw_bytes_per_us * scenario.bandwidth_scale
        if scenario.link_gbit is not None:
            r0 = calib.measured.link_gbit
            if r0:
                bw = lm.busbw_bytes_per_us * scenario.link_gbit / float(r0)
            else:
                bw = min(bw, scenario.link_gbit * GBIT_BYTES_PER_US * TCP_EFFICIENCY)
        out[kind] = lm.with_busbw(bw)
    return out


def _link(links: dict[str, LinkModel], kind: str, world: int) -> LinkModel:
    if kind in links:
        return links[kind]
    # a kind the run never measured: the measured kinds' bus bandwidth, this kind's factor
    base = next(iter(links.values()))
    return LinkModel(kind, base.latency_us, base.busbw_bytes_per_us, bus_factor(kind, world), 0)


def transfer_us(
    calib: Calibration,
    links: dict[str, LinkModel],
    c: Collective,
    measured_us: dict[tuple[str, Phase], float],
    lag_us: dict[tuple[str, Phase], float] | None = None,
) -> float:
    """Time ``c`` holds the queue under the scenario's links.

    The same collective (unit, phase) measured in the run: its measured lane time, with
    the wire part rescaled to the scenario's link (as Lumos replays measured op durations;
    :func:`rescale_lane_time`); otherwise the fitted link model.
    """
    new = _link(links, c.kind, calib.world_size)
    measured = measured_us.get((c.unit, c.phase), calib.transfer_us.get((c.unit, c.phase)))
    old = calib.links.get(c.kind)
    if measured is None or old is None:
        return new.transfer_us(c.bytes)
    lag = (lag_us or {}).get((c.unit, c.phase), 0.0)
    ratio = old.busbw_bytes_per_us / new.busbw_bytes_per_us
    return rescale_lane_time(measured, min(lag, calib.lag_fixed_us), old.latency_us, ratio)


def rescale_lane_time(lane_us: float, kept_us: float, latency_us: float, ratio: float) -> float:
    """A measured lane time on a link ``1 / ratio`` times as fast.

    ``lane = latency + kept + wire``: only the wire part scales. ``kept`` is the part of
    the lag (how long after the fastest rank the last one finished) that is the ranks' own
    delay, not the wire's: up to the run's median lag per collective
    (``Calibration.lag_fixed_us``). Lags beyond it grow with the wire: on the what-if lab
    the lag per step is 22 ms at 0.25 Gbit/s and 16 ms at 1 Gbit/s (the transfers take
    686 and 166 ms per step), and the typical (median) lag is 1.0 and 0.9 ms per step at
    both. Keeping every lag predicted each step's transfers 6.2 % long from 0.25 to
    1 Gbit/s and 3.7 % short the other way; keeping the median only, 1.2 % short and 1.6 %
    long (docs/WHATIF.md).
    """
    wire = max(lane_us - kept_us - latency_us, 0.0)
    return latency_us + kept_us + wire * ratio


def contention_under(calib: Calibration, links: dict[str, LinkModel]) -> float:
    """The compute slow-down α under the scenario's links: α follows the rate the link
    moves bytes, since communication takes CPU (or, on a GPU, SMs and memory bandwidth) per
    byte moved. Fitted across runs on the what-if lab it is 0.057 at 0.25 Gbit/s and 0.20
    at 1 Gbit/s (3.5x for a 4x rate). The ratio is the mean over the measured collective
    kinds of new to measured bus bandwidth."""
    ratios = [
        links[k].busbw_bytes_per_us / lm.busbw_bytes_per_us
        for k, lm in calib.links.items()
        if k in links and lm.busbw_bytes_per_us > 0
    ]
    return calib.contention * (sum(ratios) / len(ratios) if ratios else 1.0)
