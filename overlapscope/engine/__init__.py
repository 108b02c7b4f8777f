"""The instrumented FSDP-style engine: wrap a model by naming its units.

Public API: :class:`ShardedModel` and :class:`EngineConfig`; the policies and other choices
are enums of :mod:`overlapscope.config` (``Policy``, ``Sharding``, ``MixedPrecision``), imported
from there. See ``docs/ENGINE.md``.
"""

from typing import TYPE_CHECKING, Any

from overlapscope.config import EngineConfig

if TYPE_CHECKING:
    from overlapscope.engine.sharded import ShardedModel


def __getattr__(name: str) -> Any:
    # ShardedModel pulls in torch; configs and the CLI should not pay for that import.
    if name == "ShardedModel":
        from overlapscope.engine.sharded import ShardedModel

        return ShardedModel
    raise AttributeError(name)


__all__ = ["EngineConfig", "ShardedModel"]
