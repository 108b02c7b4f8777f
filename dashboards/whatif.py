"""The what-if panel's data: the scenario from the controls, the measured run that matches it,
and a predicted step as the analysis' ``timeline`` / ``exposed`` tables (for the timeline figure).

The prediction itself is ``overlapscope.sim``'s (``predict_from`` over the registry's cached
calibration); nothing here models anything. The one derived table is the predicted exposed
communication per rank, computed by the analysis itself from the replay's event table.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from dashboards.data import RunSource, read_manifest, workload_fields
from overlapscope.analysis.timeline.metrics import (
    comm_exposure,
    counted_mask,
    exposed_intervals,
    step_table,
    timeline_table,
)
from overlapscope.config import Policy, RunConfig
from overlapscope.errors import UserError
from overlapscope.sim import Measured, Scenario
from overlapscope.sim.events import replay_run
from overlapscope.sim.replay import Replay

LIMIT_OFF = "off"
LIMIT_CHOICES: tuple[int, ...] = (1, 2, 3)
# Lanes of the replay drawn in the timeline; the issue ranges are not (the measured timeline
# has none either: they live in the event table).
DRAWN_LANES: tuple[str, ...] = ("compute", "comm", "wait")
TIMELINE_COLUMNS = [
    "rank",
    "step",
    "lane",
    "phase",
    "unit",
    "start_us",
    "end_us",
    "dur_us",
    "bytes",
]
EXPOSED_COLUMNS = ["rank", "start_us", "end_us", "dur_us"]


class ScenarioError(UserError):
    """A control holds a value the scenario cannot take; the message names the control."""


class NetworkMode(enum.Enum):
    """How the network input is read."""

    BANDWIDTH_SCALE = "scale"  # multiplies the measured bus bandwidth
    LINK_GBIT = "gbit"  # a shaped link of this rate


NETWORK_LABELS: dict[NetworkMode, str] = {
    NetworkMode.BANDWIDTH_SCALE: "bandwidth × (1 = as measured)",
    NetworkMode.LINK_GBIT: "link Gbit/s",
}


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def scenario_from_controls(
    policy: object,
    forward_prefetch: object,
    limit: object,
    network_mode: object,
    network_value: object,
) -> Scenario:
    """The scenario the controls describe; ``ScenarioError`` names the control that is wrong.

    ``forward_prefetch`` is a checklist's value (a non-empty list when ticked) or a bool;
    ``limit`` is ``"off"`` or K; ``network_value`` is the number in the network input.
    """
    try:
        pol = Policy(policy)
    except ValueError:
        choices = ", ".join(p.value for p in Policy)
        raise ScenarioError(f"policy: {str(policy)[:40]!r} is not one of {choices}") from None
    fwd = bool(forward_prefetch)
    match limit:
        case None | "off":
            k = None
        case int() | str() if str(limit).isdigit() and int(limit) >= 1:
            k = int(limit)
        case _:
            raise ScenarioError(f"rate limiter: {str(limit)[:40]!r} is not off or K >= 1")
    try:
        mode = NetworkMode(network_mode)
    except ValueError:
        raise ScenarioError(f"network: unknown mode {str(network_mode)[:40]!r}") from None
    x = _number(network_value)
    match mode:
        case NetworkMode.BANDWIDTH_SCALE:
            if x is None or not math.isfinite(x) or x <= 0:
                raise ScenarioError(
                    f"network: the bandwidth scale must be a number > 0 (got {network_value!r}); "
                    "1 keeps the measured network"
                )
            return Scenario(pol, forward_prefetch=fwd, limit_all_gathers=k, bandwidth_scale=x)
        case NetworkMode.LINK_GBIT:
            if x is None or not math.isfinite(x) or x <= 0:
                raise ScenarioError(
                    f"network: the link rate must be a number of Gbit/s > 0 (got {network_value!r})"
                )
            return Scenario(pol, forward_prefetch=fwd, limit_all_gathers=k, link_gbit=x)
    raise AssertionError(f"unhandled network mode {mode!r}")


def scenario_link_gbit(scenario: Scenario, source_link_gbit: float | None) -> float | None:
    """The link rate (Gbit/s) of the scenario's network; None for an unshaped network.

    Only call it where ``has_link_rate``: a bandwidth scale of an unshaped run has no rate.
    """
    if scenario.link_gbit is not None:
        return scenario.link_gbit
    if source_link_gbit is None:
        return None
    return float(source_link_gbit) * scenario.bandwidth_scale


def has_link_rate(scenario: Scenario, source_link_gbit: float | None) -> bool:
    """False for a bandwidth scale (other than 1) of an unshaped run."""
    return not (
        scenario.link_gbit is None and scenario.bandwidth_scale != 1.0 and source_link_gbit is None
    )


def _same_rate(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-6)


def expected_config(source: RunConfig, scenario: Scenario) -> RunConfig | None:
    """The run.json ``config`` a run of ``scenario`` in the source's sweep would have: the
    source's, with the engine's policy, forward prefetch and limiter and the link rate set;
    None when the scenario's network cannot be written as a link rate (a bandwidth scale of
    an unshaped run)."""
    if not has_link_rate(scenario, source.link_gbit):
        return None
    engine = dataclasses.replace(
        source.engine,
        policy=scenario.policy,
        forward_prefetch=scenario.forward_prefetch,
        limit_all_gathers=scenario.limit_all_gathers,
    )
    rate = scenario_link_gbit(scenario, source.link_gbit)
    return dataclasses.replace(source, engine=engine, link_gbit=rate)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    numbers = (float, int)
    if all(isinstance(x, numbers) and not isinstance(x, bool) for x in (a, b)):
        return math.isclose(float(a), float(b), rel_tol=1e-6)
    return bool(a == b)


def matching_run(sources: Sequence[RunSource], source_key: str, scenario: Scenario) -> str | None:
    """A measured run whose run.json config is the source's under ``scenario`` (another run
    than the source first, e.g. a sweep's other configuration or repeat); None if none."""
    by_key = {s.key: s for s in sources}
    if source_key not in by_key:
        return None
    src = read_manifest(by_key[source_key].path)
    want = expected_config(src.config, scenario) if src and src.config else None
    if want is None:
        return None
    wanted = want.to_dict()
    ordered = [s for s in sources if s.key != source_key] + [by_key[source_key]]
    for s in ordered:
        manifest = read_manifest(s.path) if s.path.is_dir() else None
        if manifest is None or manifest.predicted is not None or manifest.config is None:
            continue
        if _same(manifest.config.to_dict(), wanted):
            return s.key
    return None


def workload_differences(source: RunConfig | None, target: RunConfig | None) -> str:
    """How ``target``'s run.json config runs another workload than ``source``'s (model,
    batch, ranks, device, sharding, ... but not the prefetch configuration or the link), as
    "model.dim 256, not 384"; empty when the same or when either is unknown."""
    if source is None or target is None:
        return ""
    # the link is compared on its own (the scenario may change it)
    a, b = (
        {k: v for k, v in workload_fields(c).items() if k != "link_gbit"} for c in (source, target)
    )
    keys = [k for k in dict.fromkeys([*a, *b]) if not _same(a.get(k), b.get(k))]
    return ", ".join(f"{k} {b.get(k)}, not {a.get(k)}" for k in keys)


def scenario_mismatch(
    scenario: Scenario,
    source: Measured,
    target: Measured,
    source_config: RunConfig | None = None,
    target_config: RunConfig | None = None,
) -> str | None:
    """Why ``target`` is not a measurement of ``scenario`` run on the source's workload
    (another prefetch configuration, another workload, another link rate), every reason as
    one phrase for the panel; None when it is one (or when nothing can be compared)."""
    reasons: list[str] = []
    t = target.scenario
    engine = Scenario(scenario.policy, scenario.forward_prefetch, scenario.limit_all_gathers)
    if engine != Scenario(t.policy, t.forward_prefetch, t.limit_all_gathers):
        reasons.append(
            f"was measured as {t.label}, not {engine.label}: the error compares two configurations"
        )
    work = workload_differences(source_config, target_config)
    if work:
        reasons.append(f"ran another workload ({work}): the error compares two workloads")
    if has_link_rate(scenario, source.link_gbit):
        link = scenario_link_gbit(scenario, source.link_gbit)
        if not _same_rate(link, target.link_gbit):

            def rate(x: float | None) -> str:
                return "an unshaped network" if x is None else f"a {x:g} Gbit/s link"

            reasons.append(f"ran on {rate(target.link_gbit)}, the scenario on {rate(link)}")
    return "; ".join(reasons) or None


def replay_index(counted_steps: dict[int, tuple[int, ...]], step: int | None) -> tuple[int, int]:
    """(index of the replay, measured step it replays) for ``step``: replay i is the i-th
    counted step of the lowest rank (the calibration's order); the first when ``step`` is
    not counted."""
    if not counted_steps:
        raise UserError("the run has no counted steps to replay")
    steps = sorted(counted_steps[min(counted_steps)])
    i = steps.index(step) if step in steps else 0
    return i, steps[i]


def predicted_tables(rep: Replay, step: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One replayed step as the analysis' ``timeline`` (compute, comm and wait rows; comm
    rows carry the collective's bytes) and ``exposed`` tables, times in µs from step start:
    the analysis' own functions over the replay's event table (overlapscope/sim/events.py)."""
    run = replay_run([rep], world_size=len(rep.step_time_us))
    counted = counted_mask(run)
    timeline = timeline_table(run, counted, comm_exposure(run, counted))
    timeline = timeline[timeline["lane"].astype(str).isin(DRAWN_LANES)].assign(
        step=step,
        lane=lambda t: t["lane"].astype(str),
        phase=lambda t: t["phase"].astype(str),
        unit=lambda t: t["unit"].astype(str),
        bytes=lambda t: t["bytes"].clip(lower=0),
    )
    exposed = exposed_intervals(run, counted, step_table(run, counted))
    return timeline[TIMELINE_COLUMNS].reset_index(drop=True), exposed[EXPOSED_COLUMNS]
