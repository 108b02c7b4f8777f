"""The one vocabulary of what happens in a step: lanes, collective kinds, timeline rows and
the table of phases, from which every consumer derives what it needs.

:class:`Phase` is the table. Each row gives a phase's value (the ``<phase>`` of an
``ovs/<phase>/<unit>`` range, ``trace/naming/ranges.py``; the ``phase`` column of every table), and:

* ``lane``: its range's role for the analysis (:class:`Lane`): ``issue`` (issues a
  collective; the transfer is the backend's own event), ``wait`` (the training thread blocked
  on a transfer, or held back by the rate limiter), ``memory`` (a copy: the transfer itself
  on CPU, its issue on CUDA) or ``compute``;
* ``kinds``: the collectives the backend may run for it (:class:`CollectiveKind`), its own
  first (a gloo backend of earlier engine versions ran a reduce-scatter as an all-reduce);
  a wait phase has the kinds of the phase it waits on;
* ``row``: the dashboard timeline's row it is drawn in (:class:`Row`);
* ``colour``: its colour in every view; a wait keeps its collective's hue, lighter;
* ``words``: its human name, in the legend, the critical path's sentences and ``diagnose``;
* ``part``: the part of the step it belongs to (:data:`STEP_PARTS`: forward, backward,
  optimizer; None for copies and the limiter), as the findings name where their evidence
  lies.

Consumers: the loader (lanes of ``ovs`` ranges; the issue phases whose ranges hold a
transfer), the analysis (tables keyed by phase, the path's words), the dashboard (palette,
timeline rows), the engine (the collective a phase runs) and the what-if (phases by kind).
A new phase is a row here, plus the engine's code that emits it (``engine/schedule.py``
says when); nothing else names phases one by one. A copy phase's wait, its place among the
memory levers and the drain the GPU replay makes of its wait come from its lane
(:data:`COPY_PHASES`). ``tests/vocabulary/`` adds a communication phase and a copy phase
and follows each to every consumer.
"""

from __future__ import annotations

import enum
from typing import Any

WAIT_SUFFIX = ".wait"


class Lane(enum.Enum):
    """What an event is for the analysis (the event table's ``lane`` column) and the role
    of a phase's range."""

    COMPUTE = "compute"
    COMM = "comm"  # the transfer itself (NCCL kernel, gloo op)
    WAIT = "wait"  # a thread blocked on a collective or copy
    ISSUE = "issue"  # a CPU range that issues a collective
    MEMORY = "memory"  # a memory copy / set
    STEP = "step"  # ProfilerStep#N
    OTHER = "other"


class CollectiveKind(enum.Enum):
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_REDUCE = "all_reduce"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"  # a point-to-point transfer whose direction the trace does not say
    SEND = "send"
    RECV = "recv"
    BARRIER = "barrier"
    OTHER = "other"

    @property
    def bus_factor_num(self) -> int:
        """Numerator multiplier k of nccl-tests' bus-bandwidth factor k*(n-1)/n."""
        match self:
            case CollectiveKind.ALL_REDUCE:
                return 2
            case CollectiveKind.ALL_GATHER | CollectiveKind.REDUCE_SCATTER:
                return 1
            case CollectiveKind.ALL_TO_ALL:
                return 1
            case (
                CollectiveKind.BROADCAST
                | CollectiveKind.REDUCE
                | CollectiveKind.SEND_RECV
                | CollectiveKind.SEND
                | CollectiveKind.RECV
                | CollectiveKind.BARRIER
                | CollectiveKind.OTHER
            ):
                return 0
        raise ValueError(f"unhandled collective kind {self!r}")

    def bus_factor(self, num_ranks: int) -> float:
        """nccl-tests' busbw / algbw: 2(n-1)/n all-reduce, (n-1)/n all-gather and
        reduce-scatter, 1 for broadcast, reduce and send/recv."""
        k = self.bus_factor_num
        if k == 0 or num_ranks <= 1:
            return 1.0
        return k * (num_ranks - 1) / num_ranks


class Row(enum.Enum):
    """The rows of a rank in the dashboard's timeline, top to bottom."""

    COMPUTE = "compute"
    ALL_GATHER = "all-gather"
    REDUCE = "reduce-scatter"
    WAIT = "wait"
    MEMORY = "memory"
    REPLICA = "replica all-reduce"  # HSDP's all-reduce across replicas
    TP = "tensor parallel"  # the collectives of a block's tensor-parallel layers
    EXPOSED = "exposed comm"  # the exposed intervals (analysis), under every phase


_AG = (CollectiveKind.ALL_GATHER,)
_RS = (CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE)
_AR = (CollectiveKind.ALL_REDUCE,)
_TP = (CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER)
_I, _W, _M, _C = Lane.ISSUE, Lane.WAIT, Lane.MEMORY, Lane.COMPUTE
# The parts of a step a phase may belong to (``part``).
FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"
STEP_PARTS = (FORWARD, BACKWARD, OPTIMIZER)
_FW, _BW, _OPT = FORWARD, BACKWARD, OPTIMIZER


class Phase(enum.Enum):
    """The phases, one row each (the module docstring says what each column is for)."""

    _value_: str
    lane: Lane
    kinds: tuple[CollectiveKind, ...]
    row: Row
    colour: str
    words: str
    part: str | None

    def __new__(cls, value: str, *row: Any) -> Phase:
        # (``Phase("ag_fwd")`` looks a phase up by its value; a row of the table makes one)
        obj = object.__new__(cls)
        obj._value_ = value
        obj.lane, obj.kinds, obj.row, obj.colour, obj.words, obj.part = row
        return obj

    # fmt: off
    #              value          lane  kinds  row             colour     words, part
    AG_FWD =      ("ag_fwd",      _I,   _AG,   Row.ALL_GATHER, "#F58518", "forward all-gather", _FW)
    AG_BWD =      ("ag_bwd",      _I,   _AG,   Row.ALL_GATHER, "#E45756", "backward all-gather", _BW)
    RS =          ("rs",          _I,   _RS,   Row.REDUCE,     "#54A24B", "reduce-scatter", _BW)
    AR =          ("ar",          _I,   _AR,   Row.REDUCE,     "#2E7D32", "all-reduce", _BW)
    H2D =         ("h2d",         _M,   (),    Row.MEMORY,     "#BAB0AC", "copy host→device", None)
    D2H =         ("d2h",         _M,   (),    Row.MEMORY,     "#8C8C8C", "copy device→host", None)
    AG_FWD_WAIT = ("ag_fwd.wait", _W,   _AG,   Row.WAIT,       "#FBC58C", "wait: forward all-gather", _FW)
    AG_BWD_WAIT = ("ag_bwd.wait", _W,   _AG,   Row.WAIT,       "#F2A5A4", "wait: backward all-gather", _BW)
    RS_WAIT =     ("rs.wait",     _W,   _RS,   Row.WAIT,       "#A8D5A2", "wait: reduce-scatter", _BW)
    AR_WAIT =     ("ar.wait",     _W,   _AR,   Row.WAIT,       "#8FC792", "wait: all-reduce", _BW)
    H2D_WAIT =    ("h2d.wait",    _W,   (),    Row.WAIT,       "#DDDDDD", "wait: copy", None)
    D2H_WAIT =    ("d2h.wait",    _W,   (),    Row.WAIT,       "#CCCCCC", "wait: copy", None)
    FWD =         ("fwd",         _C,   (),    Row.COMPUTE,    "#4C78A8", "forward", _FW)
    BWD =         ("bwd",         _C,   (),    Row.COMPUTE,    "#72B7B2", "backward", _BW)
    RECOMPUTE =   ("recompute",   _C,   (),    Row.COMPUTE,    "#9D755D", "recompute", _BW)
    OPTIM =       ("optim",       _C,   (),    Row.COMPUTE,    "#B279A2", "optimizer step", _OPT)
    LIMITER =     ("limiter",     _W,   (),    Row.WAIT,       "#EECA3B", "rate limiter", None)
    # the dimensions of a job of several process groups (trace/groups/dimensions.py)
    AR_REP =      ("ar_rep",      _I,   _AR,   Row.REPLICA,    "#17BECF", "replica all-reduce", _BW)
    TP_FWD =      ("tp_fwd",      _I,   _TP,   Row.TP,         "#9467BD", "forward tensor-parallel collective", _FW)
    TP_BWD =      ("tp_bwd",      _I,   _TP,   Row.TP,         "#C49C94", "backward tensor-parallel collective", _BW)
    AR_REP_WAIT = ("ar_rep.wait", _W,   _AR,   Row.WAIT,       "#9EDAE5", "wait: replica all-reduce", _BW)
    TP_FWD_WAIT = ("tp_fwd.wait", _W,   _TP,   Row.WAIT,       "#C5B0D5", "wait: forward tensor-parallel collective", _FW)
    TP_BWD_WAIT = ("tp_bwd.wait", _W,   _TP,   Row.WAIT,       "#E7CFC9", "wait: backward tensor-parallel collective", _BW)
    # fmt: on

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
        return self.kinds[0] if self.kinds else None


# Phases by lane and by collective, in table order.
COMM_PHASES = tuple(p for p in Phase if p.lane is Lane.ISSUE)  # phases that issue a collective
COPY_PHASES = tuple(p for p in Phase if p.lane is Lane.MEMORY)
WAIT_PHASES = tuple(p for p in Phase if p.lane is Lane.WAIT)
COMPUTE_PHASES = tuple(p for p in Phase if p.lane is Lane.COMPUTE)


def issuing(kind: CollectiveKind) -> tuple[Phase, ...]:
    """The communication phases whose own collective is ``kind``."""
    return tuple(p for p in COMM_PHASES if p.kinds[0] is kind)


def step_part(value: object) -> str | None:
    """The part of the step (:data:`STEP_PARTS`) a ``phase`` column's value belongs to; None
    for copies, the limiter, no phase or a value that is no phase."""
    try:
        return Phase(value).part if isinstance(value, str) else None
    except ValueError:
        return None


def values(phases: tuple[Phase, ...]) -> list[str]:
    """The values of ``phases``, as the tables' ``phase`` column holds them."""
    return [p.value for p in phases]


LANE_CATEGORIES = [lane.value for lane in Lane]
KIND_CATEGORIES = [k.value for k in CollectiveKind]
PHASE_CATEGORIES = [p.value for p in Phase]
