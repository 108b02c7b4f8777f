"""The engine's configuration, defined in :mod:`overlapscope.config` (torch-free)."""

from overlapscope.config import (
    CHECKPOINT_UNITS_FORMS,
    EngineConfig,
    MixedPrecision,
    ModelConfig,
    ModelKind,
    Policy,
    Sharding,
    check_checkpoint_units,
)

__all__ = [
    "CHECKPOINT_UNITS_FORMS",
    "EngineConfig",
    "MixedPrecision",
    "ModelConfig",
    "ModelKind",
    "Policy",
    "Sharding",
    "check_checkpoint_units",
]
