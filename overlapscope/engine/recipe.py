"""The whole configuration of one run (engine + model + training + capture), serialisable.

The launcher writes it to ``config.json`` in the run directory; every rank's worker reads it,
so all ranks run exactly the same recipe, and ``run.json`` records it.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

from overlapscope.engine.config import EngineConfig, ModelConfig


@dataclass(frozen=True, slots=True)
class ProfileWindow:
    """torch.profiler schedule: skip ``wait`` steps, warm up ``warmup``, record ``active``."""

    wait: int = 1
    warmup: int = 1
    active: int = 2

    def __post_init__(self) -> None:
        if self.wait < 0 or self.warmup < 0 or self.active < 1:
            raise ValueError("--profile-wait/--profile-warmup must be >= 0, --profile-active >= 1")

    @property
    def steps_needed(self) -> int:
        return self.wait + self.warmup + self.active

    def active_steps(self) -> list[int]:
        start = self.wait + self.warmup
        return list(range(start, start + self.active))


DEFAULT_LIMIT_WINDOW = 2  # full units alive when --limit-all-gathers is given without K


@dataclass(frozen=True, slots=True)
class RunConfig:
    engine: EngineConfig = field(default_factory=EngineConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    window: ProfileWindow = field(default_factory=ProfileWindow)
    nproc: int = 2
    steps: int = 6
    global_batch: int = 8
    seed: int = 0
    lr: float = 1e-3
    device: str = "cpu"
    backend: str = "gloo"
    link_gbit: float | None = None
    threads_per_rank: int = 1

    def __post_init__(self) -> None:
        if self.nproc < 1:
            raise ValueError(f"--nproc {self.nproc} must be >= 1")
        if self.global_batch < 1 or self.global_batch % self.nproc:
            raise ValueError(
                f"--global-batch {self.global_batch} must be a positive multiple of "
                f"--nproc {self.nproc} (it is split evenly across ranks)"
            )
        if self.steps < self.window.steps_needed:
            raise ValueError(
                f"--steps {self.steps} is fewer than the profiler needs "
                f"(wait {self.window.wait} + warmup {self.window.warmup} + active "
                f"{self.window.active} = {self.window.steps_needed}): raise --steps"
            )
        if self.link_gbit is not None and self.link_gbit <= 0:
            raise ValueError(f"--link-gbit {self.link_gbit} must be > 0")

    def to_dict(self) -> dict[str, Any]:
        def plain(v: Any) -> Any:
            if isinstance(v, enum.Enum):
                return v.value
            if dataclasses.is_dataclass(v) and not isinstance(v, type):
                return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
            return v

        return plain(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        d = dict(d)
        return cls(
            engine=EngineConfig(**d.pop("engine")),
            model=ModelConfig(**d.pop("model")),
            window=ProfileWindow(**d.pop("window")),
            **d,
        )
