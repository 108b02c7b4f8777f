"""What a trace producer plug-in is (see :mod:`overlapscope.trace.producers`)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from overlapscope.arrays import BoolArray, IntArray, ObjArray
from overlapscope.trace.attribution import Labels, RowContext
from overlapscope.trace.schema import Framework


class Producer(Protocol):
    """One trace producer: recognises its names (once per distinct name) and labels rows."""

    framework: Framework

    def recognizes(self, cats: list[str], present: BoolArray) -> bool:
        """Does the rank's trace (its distinct names ``cats``, ``present`` among its rows)
        come from this producer."""
        ...

    def label(
        self, ctx: RowContext, out: Labels, cats: list[str], codes: IntArray, warnings: list[str]
    ) -> None:
        """Fill ``phase`` / ``unit`` (and ``group``) of the rank's rows in ``out``."""
        ...


def cpu_only(hooks: ObjArray, ctx: RowContext) -> ObjArray:
    """Hook roles of CPU rows on the training threads only ("" elsewhere)."""
    return np.where(ctx.on_gpu | ctx.on_gloo_thread, "", hooks).astype(object)
