"""Memory levers installed at wrap time: activation checkpointing and CPU offload of shards.

Both are switched on by :class:`~overlapscope.engine.config.EngineConfig`
(``checkpoints(i)``, ``cpu_offload``) and applied by
:class:`~overlapscope.engine.sharded.ShardedModel`; the copies the offload needs around each
collective, on the copy stream, are :mod:`overlapscope.engine.offload_copies`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from overlapscope.engine.instrument import Instrument
from overlapscope.engine.units import Unit
from overlapscope.phases import Phase


def install_checkpointing(u: Unit, instrument: Instrument, in_backward: Callable[[], bool]) -> None:
    """Recompute ``u``'s activations in backward (non-reentrant torch checkpoint).

    The module's hooks stay outside the checkpointed function, so they fire once per
    forward; the recomputation (called by autograd during the unit's backward, after its
    all-gather) runs the original forward again and is ranged as ``recompute``.
    ``in_backward`` tells whether the schedule is in backward at call time.
    """
    original = u.module.forward

    def recompute_aware(*args: Any, **kwargs: Any) -> Any:
        if not in_backward():
            return original(*args, **kwargs)
        instrument.push(Phase.RECOMPUTE, u.name)
        try:
            return original(*args, **kwargs)
        finally:
            instrument.pop(Phase.RECOMPUTE, u.name)
            instrument.resume()

    def checkpointed(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return original(*args, **kwargs)
        return checkpoint(recompute_aware, *args, use_reentrant=False, **kwargs)

    u.module.forward = checkpointed


def offload_shards(units: list[Unit]) -> None:
    """CPU offload on CUDA: shards (and so the optimizer state) in pinned host memory."""
    for u in units:
        if u.flat is not None:
            u.flat.shard.data = u.flat.shard.data.cpu().pin_memory()
