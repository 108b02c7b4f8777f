"""The range-naming contract between the engine (which emits) and the analysis (which parses).

Every phase of every unit is one profiler range (and, on CUDA, one NVTX range) named::

    ovs/<phase>/<unit>

``<phase>`` is a :class:`Phase` value, ``<unit>`` the unit's name (a module path such as
``blocks.3``; ``root`` for the parameters outside every unit; ``all`` for the optimizer step).
Unit names never contain ``/``.

Where each range sits and what it covers:

====================  =========  ==========================================================
phase                 lane       the range covers
====================  =========  ==========================================================
``ag_fwd``            issue      issuing the forward all-gather of the unit (CPU thread).
``ag_bwd``            issue      issuing the backward all-gather (re-gather after reshard).
``rs``                issue      issuing the gradient reduce-scatter.
``ar``                issue      issuing the gradient all-reduce (``no_shard``).
``h2d`` / ``d2h``     memory     the shard copy to / from the device (CPU offload; on CPU
                                 runs the copy itself, on CUDA its issue on the copy stream).
``<comm>.wait``       wait       the training thread blocked until that collective is done
                                 (``ag_fwd.wait``, ``ag_bwd.wait``, ``rs.wait``, ...).
``fwd``               compute    the unit's own forward compute (children excluded).
``bwd``               compute    the unit's own gradient compute (children excluded).
``recompute``         compute    activation recomputation in backward (checkpointing).
``optim``             compute    the optimizer step on the shards (unit ``all``).
``limiter``           wait       the rate limiter holding back an all-gather of the unit.
====================  =========  ==========================================================

The issue ranges mark the *issue* on the training thread. The transfer itself is the
backend's own event: on CUDA the NCCL kernel launched inside the range (linked by its
correlation id). On CPU the engine builds all-gather and reduce-scatter from gloo sends and
receives (``overlapscope/engine/p2p.py``); gloo records each as a ``gloo:send`` /
``gloo:recv`` event on the training thread that starts inside the issue range and ends when
the transfer completed; the analysis folds them into one transfer per range
(``overlapscope/trace/p2p.py``). ``no_shard``'s all-reduce is a ``gloo:all_reduce`` op on the
comm group's single gloo thread, which runs them in issue order (the k-th op belongs to the
k-th ``ar`` range). Traces of earlier engine versions carry ``gloo:all_gather`` /
``gloo:all_reduce`` ops on that thread for every collective, and still read the same way.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from overlapscope.trace.schema import CollectiveKind

PREFIX = "ovs"
WAIT_SUFFIX = ".wait"
OPTIM_UNIT = "all"
ROOT_UNIT = "root"


class Lane(enum.Enum):
    """The one lane vocabulary: what an event is for the analysis (the event table's
    ``lane`` column, ``schema.EventLane``) and where a phase's range sits."""

    COMPUTE = "compute"
    COMM = "comm"  # the transfer itself (NCCL kernel, gloo op)
    WAIT = "wait"  # a thread blocked on a collective or copy
    ISSUE = "issue"  # a CPU range that issues a collective
    MEMORY = "memory"  # a memory copy / set
    STEP = "step"  # ProfilerStep#N
    OTHER = "other"


class Phase(enum.Enum):
    AG_FWD = "ag_fwd"
    AG_BWD = "ag_bwd"
    RS = "rs"
    AR = "ar"
    H2D = "h2d"
    D2H = "d2h"
    AG_FWD_WAIT = "ag_fwd.wait"
    AG_BWD_WAIT = "ag_bwd.wait"
    RS_WAIT = "rs.wait"
    AR_WAIT = "ar.wait"
    H2D_WAIT = "h2d.wait"
    D2H_WAIT = "d2h.wait"
    FWD = "fwd"
    BWD = "bwd"
    RECOMPUTE = "recompute"
    OPTIM = "optim"
    LIMITER = "limiter"

    @property
    def lane(self) -> Lane:
        match self:
            case Phase.AG_FWD | Phase.AG_BWD | Phase.RS | Phase.AR:
                return Lane.ISSUE
            case Phase.H2D | Phase.D2H:
                return Lane.MEMORY
            case (
                Phase.AG_FWD_WAIT
                | Phase.AG_BWD_WAIT
                | Phase.RS_WAIT
                | Phase.AR_WAIT
                | Phase.H2D_WAIT
                | Phase.D2H_WAIT
                | Phase.LIMITER
            ):
                return Lane.WAIT
            case Phase.FWD | Phase.BWD | Phase.RECOMPUTE | Phase.OPTIM:
                return Lane.COMPUTE
        raise ValueError(f"unhandled phase {self!r}")

    @property
    def wait(self) -> Phase:
        """The wait phase of a communication or copy phase (``ag_bwd`` -> ``ag_bwd.wait``)."""
        if self.lane not in (Lane.ISSUE, Lane.MEMORY):
            raise ValueError(f"phase {self.value!r} is not a communication phase")
        return Phase(self.value + WAIT_SUFFIX)

    @property
    def awaited(self) -> Phase | None:
        """The communication phase a wait phase waits on (``rs.wait`` -> ``rs``)."""
        if self.value.endswith(WAIT_SUFFIX):
            return Phase(self.value[: -len(WAIT_SUFFIX)])
        return None

    @property
    def collective_kind(self) -> CollectiveKind | None:
        """The collective a communication phase (or its wait) stands for; None for compute,
        copies and the limiter. What actually ran is the event's ``kind`` (a backend may run
        a reduce-scatter as an all-reduce)."""
        from overlapscope.trace.schema import CollectiveKind  # (schema imports this module)

        match self.awaited or self:
            case Phase.AG_FWD | Phase.AG_BWD:
                return CollectiveKind.ALL_GATHER
            case Phase.RS:
                return CollectiveKind.REDUCE_SCATTER
            case Phase.AR:
                return CollectiveKind.ALL_REDUCE
        return None


COMM_PHASES = tuple(p for p in Phase if p.lane is Lane.ISSUE)  # phases that issue a collective
COPY_PHASES = tuple(p for p in Phase if p.lane is Lane.MEMORY)
WAIT_PHASES = tuple(p for p in Phase if p.lane is Lane.WAIT)
COMPUTE_PHASES = tuple(p for p in Phase if p.lane is Lane.COMPUTE)

_RANGE_RE = re.compile(r"^ovs/(?P<phase>[a-z0-9_.]+)/(?P<unit>[^/]+)$")


@dataclass(frozen=True, slots=True)
class RangeName:
    phase: Phase
    unit: str

    def __str__(self) -> str:
        return format_range(self.phase, self.unit)


def format_range(phase: Phase, unit: str) -> str:
    if not unit or "/" in unit:
        raise ValueError(f"unit name {unit!r} must be non-empty and contain no '/'")
    return f"{PREFIX}/{phase.value}/{unit}"


def parse_range(name: str) -> RangeName | None:
    """Parse ``ovs/<phase>/<unit>``; None for any other name (or an unknown phase)."""
    m = _RANGE_RE.match(name)
    if m is None:
        return None
    try:
        phase = Phase(m.group("phase"))
    except ValueError:
        return None
    return RangeName(phase, m.group("unit"))
