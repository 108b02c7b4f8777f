"""Any other trace (plain NCCL/RCCL, CPU-only gloo): collectives keep kind, size and group;
no unit or phase is known."""

from __future__ import annotations

from overlapscope.arrays import BoolArray, IntArray
from overlapscope.trace.attribution import Labels, RowContext
from overlapscope.trace.schema import Framework


class Generic:
    framework = Framework.GENERIC

    def recognizes(self, cats: list[str], present: BoolArray) -> bool:
        return True

    def label(
        self, ctx: RowContext, out: Labels, cats: list[str], codes: IntArray, warnings: list[str]
    ) -> None:
        return None
