"""Trace producers as plug-ins: one module per producer, tried in order.

Each producer (:class:`~overlapscope.trace.producers.base.Producer`) classifies the rank's
distinct names once (``recognizes``) and labels its rows with units and phases (``label``).
:data:`PRODUCERS` is the one registry: the first that recognises a trace labels it, the
generic one last. A new producer (Megatron, DeepSpeed) is one module here and one line in
:data:`PRODUCERS`, with its fixture in ``tests/trace``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from overlapscope.trace.producers.base import Producer
from overlapscope.trace.producers.fsdp1 import Fsdp1
from overlapscope.trace.producers.fsdp2 import Fsdp2
from overlapscope.trace.producers.generic import Generic
from overlapscope.trace.producers.ours import Ours

PRODUCERS: tuple[Producer, ...] = (Ours(), Fsdp2(), Fsdp1(), Generic())


def detect(cats: list[str], present: npt.NDArray[np.bool_]) -> Producer:
    """The first producer of :data:`PRODUCERS` that recognises the names."""
    return next(p for p in PRODUCERS if p.recognizes(cats, present))


__all__ = ["PRODUCERS", "Producer", "detect"]
