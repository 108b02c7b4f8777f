"""The instrumented FSDP-style engine: wrap a model by naming its units.

Public API: :class:`ShardedModel`, :class:`EngineConfig`, :class:`Policy`,
:class:`Sharding`, :class:`MixedPrecision`. See ``docs/ENGINE.md``.
"""

from typing import TYPE_CHECKING, Any

from overlapscope.config import EngineConfig, MixedPrecision, Policy, Sharding

if TYPE_CHECKING:
    from overlapscope.engine.sharded import ShardedModel


def __getattr__(name: str) -> Any:
    # ShardedModel pulls in torch; configs and the CLI should not pay for that import.
    if name == "ShardedModel":
        from overlapscope.engine.sharded import ShardedModel

        return ShardedModel
    raise AttributeError(name)


__all__ = ["EngineConfig", "MixedPrecision", "Policy", "ShardedModel", "Sharding"]
