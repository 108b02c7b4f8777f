"""Any other trace (plain NCCL/RCCL, CPU-only gloo): collectives keep kind, size and group;
no unit or phase is known."""

from __future__ import annotations

from overlapscope.arrays import BoolArray, IntArray
from overlapscope.trace.attribution import Labels, RowContext
from overlapscope.trace.producers.base import RangeRule


class Generic:
    name = "generic"
    infers_schedule = False

    def recognizes(self, cats: list[str], present: BoolArray) -> bool:
        return True

    def rule(self, name: str) -> RangeRule | None:
        return None

    def label(
        self, ctx: RowContext, out: Labels, cats: list[str], codes: IntArray, warnings: list[str]
    ) -> None:
        return None
