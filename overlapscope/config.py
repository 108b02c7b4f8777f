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
from dataclasses import dataclass
from typing import Any

from overlapscope.field_flags import flag, nested

DEFAULT_LIMIT_WINDOW = 2  # full units alive when --limit-all-gathers is given without K
# Upper bounds of the flags: far beyond anything a local run can hold, low enough that a typo
# (an extra zero or three) is refused in one line instead of exhausting memory or processes.
MAX_RANKS = 1024
MAX_WIDTH = 1 << 16


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

    policy: Policy = flag(
        Policy.BACKWARD_PRE, help="when the next unit's backward all-gather is issued"
    )
    forward_prefetch: bool = flag(False, help="prefetch in forward too")
    limit_all_gathers: int | None = flag(
        None,
        metavar="K",
        low=1,
        hint=" (leave the flag out to turn the rate limiter off)",
        const=DEFAULT_LIMIT_WINDOW,
        help="rate limiter: hold prefetches while K units are alive "
        f"(K={DEFAULT_LIMIT_WINDOW} if omitted; default: off)",
    )
    sharding: Sharding = flag(
        Sharding.FULL_SHARD,
        help="full_shard: re-gather in backward; shard_grad_op: keep full parameters from "
        "forward to backward; no_shard: DDP-like all-reduce",
    )
    mixed_precision: MixedPrecision = flag(
        MixedPrecision.NONE,
        help="bf16: bf16 compute and all-gather, fp32 shards and gradient reduction",
    )
    instrument: bool = flag(
        True, name="--no-instrument", invert=True, help="no profiler ranges (overhead baseline)"
    )
    cpu_offload: bool = flag(
        False,
        help="shards and optimizer in host memory, copied in (h2d) / out (d2h) around "
        "collectives (on CPU runs: same phases, host copies)",
    )
    checkpoint_units: str = flag(
        "none",
        parse=check_checkpoint_units,
        metavar="{none,all,every-N}",
        help="recompute these units' activations in backward (activation checkpointing; "
        "every-N: every N-th unit, the first included; default: %(default)s)",
    )

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
    kind: ModelKind = flag(
        ModelKind.GPT, name="--model", help="gpt: transformer blocks; mlp: Linear + GELU layers"
    )
    layers: int = flag(
        4,
        low=1,
        high=1024,
        metavar="N",
        help="blocks (gpt) or layers (mlp), one sharded unit each",
    )
    dim: int = flag(256, low=1, high=MAX_WIDTH, metavar="D", help="width")
    heads: int = flag(
        4, low=1, high=MAX_WIDTH, metavar="H", help="attention heads (gpt), must divide --dim"
    )
    seq_len: int = flag(128, low=1, high=1 << 20, metavar="T", help="tokens per sample")
    vocab: int = flag(1024, low=2, high=1 << 24, metavar="V", help="vocabulary size")

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

    wait: int = flag(
        1, name="--profile-wait", low=0, high=1 << 20, metavar="N",
        help="steps before the profiler starts",
    )  # fmt: skip
    warmup: int = flag(
        1, name="--profile-warmup", low=0, high=1 << 20, metavar="N",
        help="profiler warm-up steps, not recorded",
    )  # fmt: skip
    active: int = flag(
        2, name="--profile-active", low=1, high=1 << 20, metavar="N",
        help="profiled (recorded) steps",
    )  # fmt: skip

    def __post_init__(self) -> None:
        if self.wait < 0 or self.warmup < 0 or self.active < 1:
            raise ValueError("--profile-wait/--profile-warmup must be >= 0, --profile-active >= 1")

    @property
    def steps_needed(self) -> int:
        return self.wait + self.warmup + self.active

    def active_steps(self) -> list[int]:
        start = self.wait + self.warmup
        return list(range(start, start + self.active))


@dataclass(frozen=True, slots=True)
class RunConfig:
    engine: EngineConfig = nested(EngineConfig, "engine")
    model: ModelConfig = nested(ModelConfig, "workload")
    window: ProfileWindow = nested(ProfileWindow)
    nproc: int = flag(2, low=1, high=MAX_RANKS, metavar="N", help="ranks")
    steps: int = flag(6, low=1, high=1 << 20, metavar="S", help="training steps")
    global_batch: int = flag(
        8, low=1, high=1 << 20, metavar="B", help="samples per step, split evenly across ranks"
    )
    seed: int = flag(0, low=0, high=(1 << 63) - 1, help="seed of weights and data")
    lr: float = flag(1e-3, help="learning rate, a finite number > 0")
    device: str = flag(
        "cpu",
        cli_default="auto",
        choices=("auto", "cpu", "cuda"),
        help="auto: cuda if available, else cpu",
    )
    backend: str = flag(
        "gloo",
        cli_default="auto",
        choices=("auto", "gloo", "nccl"),
        help="auto: nccl on cuda when every rank has a GPU of its own, else gloo (on cuda: "
        "staged through pinned host memory)",
    )
    link_gbit: float | None = flag(
        None,
        metavar="R",
        unit="Gbit/s",
        help="run each rank in its own network namespace over a link shaped to {metavar} "
        "{unit}, a finite number > 0 (needs root and iproute2; default: unshaped loopback)",
    )
    threads_per_rank: int = flag(
        1,
        cli_default=0,
        low=0,
        high=4096,
        hint=" (0 = auto: cores / --nproc)",
        metavar="N",
        help="torch threads per rank; 0 = auto: CPU cores / --nproc, at least 1",
    )
    flight_recorder: int | None = flag(
        None,
        low=1,
        high=1 << 24,
        const=20_000,
        metavar="N",
        help="record the last {metavar} collectives per rank with torch's Flight Recorder and "
        "dump them to comm_traces/rank_<K> at the end of the run (overlapscope/flight/; "
        "{metavar}: 20000 when left out; default: off)",
    )

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
