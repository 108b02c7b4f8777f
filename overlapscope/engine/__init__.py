"""The instrumented FSDP-style engine: wrap a model by naming its units.

Public API: :class:`ShardedModel`, :class:`EngineConfig`, :class:`Policy`,
:class:`Sharding`, :class:`MixedPrecision`. See ``docs/ENGINE.md``.
"""

from overlapscope.engine.config import EngineConfig, MixedPrecision, Policy, Sharding
from overlapscope.engine.sharded import ShardedModel

__all__ = ["EngineConfig", "MixedPrecision", "Policy", "ShardedModel", "Sharding"]
