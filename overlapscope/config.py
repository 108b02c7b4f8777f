"""The whole configuration of one run, torch-free: the engine's closed vocabularies as enums,
validated frozen dataclasses for the engine, the model, the profiler window, and
:class:`RunConfig` (engine + model + training + capture).

The launcher writes a :class:`RunConfig` to ``config.json`` in the run directory; every rank's
worker reads it, so all ranks run exactly the same recipe, and ``run.json`` records it
(``overlapscope/manifest.py``). Nothing here imports torch or the engine, so the trace loader
and the manifest read configs without either.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any


class Policy(enum.Enum):
    """When the backward all-gather of the next unit is issued.

    ``none``           on demand, when the unit's backward starts (nothing hides it).
    ``backward_post``  after the current unit's gradient compute (before its reduce-scatter).
    ``backward_pre``   before the current unit's gradient compute (two units alive).
    """

    NONE = "none"
    BACKWARD_POST = "backward_post"
    BACKWARD_PRE = "backward_pre"


class Sharding(enum.Enum):
    """``full_shard``: reshard after forward, re-gather in backward, reduce-scatter grads.
    ``shard_grad_op``: keep full params from forward to backward, reduce-scatter grads.
    ``no_shard``: every rank keeps full params, all-reduce grads (DDP-like)."""

    FULL_SHARD = "full_shard"
    SHARD_GRAD_OP = "shard_grad_op"
    NO_SHARD = "no_shard"


class MixedPrecision(enum.Enum):
    """``none``: fp32 everywhere. ``bf16``: bf16 full params for compute and all-gather,
    fp32 shards, fp32 gradient reduction."""

    NONE = "none"
    BF16 = "bf16"


def _enum_value(enum_cls: type[enum.Enum], value: object, field: str) -> enum.Enum:
    if isinstance(value, enum_cls):
        return value
    try:
        return enum_cls(value)
    except ValueError:
        choices = ", ".join(str(m.value) for m in enum_cls)
        raise ValueError(f"{field}={value!r} is not one of: {choices}") from None


CHECKPOINT_UNITS_FORMS = "none, all or every-N with N >= 1 (e.g. every-2)"


def check_checkpoint_units(spec: object) -> str:
    """``spec`` if it names which units to checkpoint (``none``, ``all`` or ``every-N``,
    N >= 1); otherwise ValueError ``'<spec>': use none, all or every-N ...``."""
    if isinstance(spec, str):
        every = spec.removeprefix("every-")
        if spec in ("none", "all") or (
            spec.startswith("every-") and every.isascii() and every.isdigit() and int(every) >= 1
        ):
            return spec
    raise ValueError(f"{spec!r}: use {CHECKPOINT_UNITS_FORMS}")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How the sharded engine schedules communication.

    ``limit_all_gathers``: the rate limiter's window, the most units (root excluded) whose
    full parameters may be alive when a *prefetch* is issued; ``None`` disables it. On-demand
    all-gathers are never held back (the data is needed now).
    ``instrument``: emit profiler/NVTX ranges (off for overhead measurements).
    ``cpu_offload``: shards (and the optimizer) live in host memory; before a unit's
    all-gather its shard is copied to the device (``h2d``), reduced gradients are copied back
    (``d2h``). On CPU runs placement does not change, but the copies still happen (a host
    copy), so the timeline has the same phases.
    ``checkpoint_units``: ``none``, ``all`` or ``every-N`` (every N-th unit in forward order,
    starting with the first): those units drop their activations after forward and recompute
    them in backward, inside the backward all-gather window (``recompute`` phase).
    """

    policy: Policy = Policy.BACKWARD_PRE
    forward_prefetch: bool = False
    limit_all_gathers: int | None = None
    sharding: Sharding = Sharding.FULL_SHARD
    mixed_precision: MixedPrecision = MixedPrecision.NONE
    instrument: bool = True
    cpu_offload: bool = False
    checkpoint_units: str = "none"

    def checkpoints(self, index: int) -> bool:
        """Whether the unit at ``index`` (forward order, root excluded) is checkpointed."""
        spec = self.checkpoint_units
        if spec == "none":
            return False
        if spec == "all":
            return True
        return index % int(spec.removeprefix("every-")) == 0

    def __post_init__(self) -> None:
        try:
            check_checkpoint_units(self.checkpoint_units)
        except ValueError as e:
            raise ValueError(f"--checkpoint-units {e}") from None
        object.__setattr__(self, "policy", _enum_value(Policy, self.policy, "policy"))
        object.__setattr__(self, "sharding", _enum_value(Sharding, self.sharding, "sharding"))
        object.__setattr__(
            self,
            "mixed_precision",
            _enum_value(MixedPrecision, self.mixed_precision, "mixed_precision"),
        )
        if self.limit_all_gathers is not None and self.limit_all_gathers < 1:
            raise ValueError(
                f"--limit-all-gathers {self.limit_all_gathers}: K must be >= 1 "
                "(leave the flag out to turn the rate limiter off)"
            )


class ModelKind(enum.Enum):
    GPT = "gpt"
    MLP = "mlp"


@dataclass(frozen=True, slots=True)
class ModelConfig:
    kind: ModelKind = ModelKind.GPT
    layers: int = 4
    dim: int = 256
    heads: int = 4
    seq_len: int = 128
    vocab: int = 1024

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ModelKind(self.kind))
        for name in ("layers", "dim", "heads", "seq_len", "vocab"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
        if self.kind is ModelKind.GPT and self.dim % self.heads:
            raise ValueError(f"--dim {self.dim} must be divisible by --heads {self.heads}")


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
    # entries of torch's Flight Recorder ring buffer per rank, dumped to comm_traces/ at the
    # end of the run (overlapscope/flight/); None: off
    flight_recorder: int | None = None

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
        if self.flight_recorder is not None and self.flight_recorder < 1:
            raise ValueError(f"--flight-recorder {self.flight_recorder} must be >= 1 entries")

    def to_dict(self) -> dict[str, Any]:
        def plain(v: Any) -> Any:
            if isinstance(v, enum.Enum):
                return v.value
            if dataclasses.is_dataclass(v) and not isinstance(v, type):
                return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
            return v

        d: dict[str, Any] = plain(self)
        # added after runs were shipped: left out while off, so their configs read the same
        if d["flight_recorder"] is None:
            del d["flight_recorder"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        d = dict(d)
        return cls(
            engine=EngineConfig(**d.pop("engine")),
            model=ModelConfig(**d.pop("model")),
            window=ProfileWindow(**d.pop("window")),
            **d,
        )
