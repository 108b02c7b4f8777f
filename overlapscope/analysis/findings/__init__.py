"""Findings: what ``diagnose`` says, each ranked by the time at stake, with its evidence and
the levers to try.

A finding is one module of this package (its rule, the cause words it gives, its levers) and
one line in :data:`overlapscope.analysis.findings.registry.BUILT_IN`; outside the package, one
call to :func:`~overlapscope.analysis.findings.registry.register`. This module holds what every
finding shares: the threshold (:data:`MIN_STAKE_FRACTION`), the one typed input of every rule
(:class:`FindingInput`), a finding (:class:`Finding`) with its structured evidence
(:class:`Evidence`) and levers (:class:`Lever`), and the rule's declaration
(:class:`FindingRule`).

Every finding's ``stake_us`` is time per step (mean over ranks) that its change could win back
at most; a finding is reported only when its stake passes ``MIN_STAKE_FRACTION`` of the mean
step time.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from overlapscope.analysis.framework import Framework
from overlapscope.manifest import RunManifest

if TYPE_CHECKING:
    from overlapscope.analysis.critical_path.path import CriticalPath

# A finding needs more than this share of the mean step time at stake (the one threshold).
MIN_STAKE_FRACTION = 0.01


class FindingKind(str, enum.Enum):
    """The built-in findings' kinds (a finding registered from outside names its own)."""

    BACKWARD_ALL_GATHER_EXPOSED = "backward_all_gather_exposed"
    FORWARD_ALL_GATHER_EXPOSED = "forward_all_gather_exposed"
    RATE_LIMITER = "rate_limiter"
    STRAGGLER = "straggler"
    NETWORK = "network"
    CRITICAL_PATH = "critical_path"
    HOST_STARVED = "host_starved"
    HOST_SYNC = "host_sync"
    STEP_BOUNDARY = "step_boundary"
    REDUCE_SCATTER_EXPOSED = "reduce_scatter_exposed"  # findings/dimensions.py
    REPLICA_ALL_REDUCE_EXPOSED = "replica_all_reduce_exposed"
    TP_EXPOSED = "tp_exposed"
    COLLECTIVE_HANG = "collective_hang"  # Flight Recorder dumps (flight/findings.py)
    PEER_WAIT = "peer_wait"  # Flight Recorder dumps (flight/findings.py)


# The cause words a finding may give (docs/ANALYSIS.md, "Causes"): what made the time lost.
CAUSES: dict[str, str] = {
    "exposed_transfer": "a collective's transfer ran longer than the compute meant to hide it",
    "rate_limited": "all-gathers held back by the rate limiter",
    "late_start": "a rank entered the step late (skew carried in from before the window) and "
    "caught up over the step, its peers waiting for it",
    "slow_rank": "a rank grew late inside the step: its peers waited for it at the collectives",
    "slow_link": "collectives moved their bytes far below the link's speed",
    "critical_path": "compute work on the step's critical path",
    "host_bound": "the GPU ran dry because its host launched the next op late",
    "data_loading": "the host was loading the next batch while the GPU had nothing queued",
    "sync": "a host call blocked until the GPU caught up, and the queue drained behind it",
}


@dataclass(frozen=True, slots=True)
class Evidence:
    """One piece of time a finding rests on: on ``rank`` in ``step`` (None: over the run's
    counted steps), from ``start_us`` (on the aligned clock; None: a total, not one interval)
    for ``dur_us``; the CPU op chain it concerns, outermost to innermost, and the GPU op.
    ``in_step_us``: ``start_us`` less its step's start on that rank (the step's first GPU op;
    negative: before it, at the step boundary), filled in by the registry. ``measures``:
    named figures of the interval where a finding compares ranks by them (a part of the
    step's ``op_us``, ``launch_median_us``, ``idle_us``, ``num_ops``; the JSON carries them
    only where there are any)."""

    rank: int
    step: int | None
    start_us: float | None
    dur_us: float
    cpu_ops: tuple[str, ...] = ()
    gpu_op: str | None = None
    in_step_us: float | None = None
    measures: tuple[tuple[str, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {
            "rank": self.rank,
            "step": self.step,
            "start_us": self.start_us,
            "in_step_us": self.in_step_us,
            "dur_us": self.dur_us,
            "cpu_ops": list(self.cpu_ops),
            "gpu_op": self.gpu_op,
        }
        return out | ({"measures": dict(self.measures)} if self.measures else {})


@dataclass(frozen=True, slots=True)
class Lever:
    """A change to try, why it applies here, and the stake it addresses (µs per step; None:
    the finding's)."""

    lever: str
    why: str = ""
    stake_us: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"lever": self.lever, "why": self.why, "stake_us": self.stake_us}


@dataclass(frozen=True, slots=True)
class Finding:
    """``summary``: the evidence in one sentence; ``levers``: what to try, most fitting first
    (a str is taken as one lever); ``rank``: the one rank it is about, if any; ``ranks``,
    ``steps``: those it concerns (``ranks`` defaults to ``rank``); ``phase``: where in the step
    (forward, backward, optimizer, step boundary); ``cause``: a word of :data:`CAUSES` or of the
    registered rules' ``causes``; ``evidence``: the intervals it rests on."""

    kind: FindingKind | str
    stake_us: float  # per step, mean over ranks
    title: str
    summary: str
    levers: tuple[Lever, ...] = ()
    rank: int | None = None
    ranks: tuple[int, ...] = ()
    steps: tuple[int, ...] = ()
    phase: str | None = None
    cause: str | None = None
    evidence: tuple[Evidence, ...] = ()

    def __post_init__(self) -> None:
        given: object = self.levers
        levers = (Lever(given),) if isinstance(given, str) else tuple(self.levers)
        levers = tuple(
            lv if lv.stake_us is not None else Lever(lv.lever, lv.why, self.stake_us)
            for lv in levers
        )
        object.__setattr__(self, "levers", levers)
        if not self.ranks and self.rank is not None:
            object.__setattr__(self, "ranks", (self.rank,))

    @property
    def change(self) -> str:
        """The levers, most fitting first, in one line."""
        return "; ".join(lv.lever for lv in self.levers)

    @property
    def kind_name(self) -> str:
        return self.kind.value if isinstance(self.kind, FindingKind) else str(self.kind)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind_name,
            "stake_us": self.stake_us,
            "title": self.title,
            "summary": self.summary,
            "rank": self.rank,
            "ranks": list(self.ranks),
            "steps": list(self.steps),
            "phase": self.phase,
            "cause": self.cause,
            "evidence": [e.to_dict() for e in self.evidence],
            "levers": [lv.to_dict() for lv in self.levers],
        }


@dataclass(frozen=True, slots=True)
class FindingInput:
    """What every rule reads: the analysis' tables (``ranks, steps, units, collectives,
    host_ops``; ``tables``: every figure by name, the registered ones too), the run's
    manifest, whether it ran on GPUs, the critical path (None: none) and the framework that
    ran the job (analysis/framework.py: a lever is offered in its API words)."""

    ranks: pd.DataFrame
    steps: pd.DataFrame
    units: pd.DataFrame
    collectives: pd.DataFrame
    host_ops: pd.DataFrame
    manifest: RunManifest | None = None
    has_gpu: bool = True
    path: CriticalPath | None = None
    tables: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    framework: Framework = Framework.PLAIN

    @property
    def step_us(self) -> float:
        """The mean step time over ranks (NaN: no rank)."""
        if self.ranks.empty:
            return float("nan")
        return float(self.ranks["step_time_per_step_us"].mean())

    @property
    def num_steps(self) -> float:
        """The mean number of counted steps over ranks (at least 1 each)."""
        return float(self.ranks["num_steps"].clip(lower=1).mean())

    @property
    def is_engine_run(self) -> bool:
        """An overlapscope engine run (its run.json lists units): changed with our flags."""
        return self.framework is Framework.ENGINE

    def table(self, name: str) -> pd.DataFrame:
        """The figure ``name`` (an empty table where the analysis has none)."""
        return self.tables.get(name, pd.DataFrame())

    def at_stake(self, stake_us: float) -> bool:
        """Whether ``stake_us`` passes the threshold (never on a run without a step time)."""
        step = self.step_us
        return bool(np.isfinite(step)) and stake_us > MIN_STAKE_FRACTION * step


@dataclass(frozen=True, slots=True)
class FindingRule:
    """A registered finding: its ``kind``; ``looks_for``, what ``diagnose`` says it looked for
    when nothing is found (``exposed backward all-gathers``); ``rule``, one sentence for the
    manual; ``causes``, the cause words it gives (their meaning); and ``find``, the rule."""

    kind: str
    looks_for: str
    rule: str
    find: Callable[[FindingInput], Sequence[Finding]]
    causes: Mapping[str, str] = field(default_factory=dict)


def threshold_words() -> str:
    """The threshold as the outputs say it (``N% of the step time``)."""
    return f"{MIN_STAKE_FRACTION:.0%} of the step time"
