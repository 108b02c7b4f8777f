"""What a trace producer plug-in is (see :mod:`overlapscope.trace.producers`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from overlapscope.arrays import BoolArray, IntArray, ObjArray
from overlapscope.phases import Lane, Phase
from overlapscope.trace.attribution import Labels, RowContext


@dataclass(frozen=True, slots=True)
class RangeRule:
    """What one of a producer's range names is, for its CPU rows: their ``lane`` (``issue``
    for a range that issues a collective, ``wait`` for one that holds the thread, ``memory``,
    or ``compute`` for the producer's own compute ranges: these make the rank's compute when
    the trace has no GPU activity), and the ``phase`` and ``unit`` the name gives, if any."""

    lane: Lane
    phase: Phase | None = None
    unit: str | None = None


class LabelRole(enum.Enum):
    """What a framework range means for the collectives that run inside it."""

    ISSUE_AG = "issue_ag"  # an all-gather of the named unit (phase from the context)
    ISSUE_AG_FWD = "issue_ag_fwd"
    ISSUE_AG_BWD = "issue_ag_bwd"
    ISSUE_RS = "issue_rs"
    CONTEXT_FWD = "context_fwd"
    CONTEXT_BWD = "context_bwd"
    LIMITER = "limiter"


class Producer(Protocol):
    """One trace producer (a framework whose traces overlapscope reads).

    ``name``: the framework, as the reports name it (``frameworks`` in the JSON, the ranks
    table's ``framework``). ``infers_schedule``: its traces show each unit's all-gathers and
    reduce-scatters in the order an FSDP schedule issues them, from which the what-if infers
    the policy (``sim/torch_fsdp.py``). The loader calls :meth:`recognizes` on the rank's
    distinct names; of the producer that recognises them, :meth:`rule` once per distinct
    name (the lanes, phases and units names carry) and :meth:`label` once per rank (what
    only the rows' nesting and order tell)."""

    name: str
    infers_schedule: bool

    def recognizes(self, cats: list[str], present: BoolArray) -> bool:
        """Does the rank's trace (its distinct names ``cats``, ``present`` among its rows)
        come from this producer."""
        ...

    def rule(self, name: str) -> RangeRule | None:
        """The lane (and phase, unit) of CPU rows of this name; None: the generic rules
        (``trace/naming/generic.py``) decide."""
        ...

    def label(
        self, ctx: RowContext, out: Labels, cats: list[str], codes: IntArray, warnings: list[str]
    ) -> None:
        """Fill ``phase`` / ``unit`` (and ``group``) of the rank's rows in ``out``."""
        ...


def cpu_only(hooks: ObjArray, ctx: RowContext) -> ObjArray:
    """Hook roles of CPU rows on the training threads only ("" elsewhere)."""
    return np.where(ctx.on_gpu | ctx.on_gloo_thread, "", hooks).astype(object)
