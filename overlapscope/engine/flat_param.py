"""One unit's parameters flattened into one buffer, sharded evenly across ranks.

Layout: the unit's parameters are concatenated (in registration order) into one 1-D buffer,
padded with zeros to a multiple of ``world_size`` and split into equal chunks; rank ``r``
keeps chunk ``r`` as an fp32 ``nn.Parameter`` (the *shard*, what the optimizer steps on).

The *full* buffer is a leaf tensor of the compute dtype whose storage exists only while the
unit is gathered: :meth:`FlatParam.alloc_full` re-grows it, :meth:`FlatParam.free_full`
shrinks it to zero bytes. The module's parameters are replaced by views into it, created
fresh at every forward so autograd routes their gradients into ``full.grad``. Views saved by
autograd for backward share the storage, so re-gathering into the same storage before the
unit's backward makes them valid again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True, slots=True)
class ParamSlot:
    """Where one original parameter lives inside the flat buffer."""

    module: nn.Module
    attr: str
    fqn: str
    shape: torch.Size
    offset: int
    numel: int


class FlatParam:
    def __init__(
        self,
        params: list[tuple[str, nn.Module, str, nn.Parameter]],
        *,
        rank: int,
        world_size: int,
        compute_dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        if not params:
            raise ValueError("a FlatParam needs at least one parameter")
        slots: list[ParamSlot] = []
        offset = 0
        for fqn, module, attr, p in params:
            slots.append(ParamSlot(module, attr, fqn, p.shape, offset, p.numel()))
            offset += p.numel()
        self.slots = tuple(slots)
        self.numel = offset
        self.world_size = world_size
        self.rank = rank
        self.padded_numel = -(-offset // world_size) * world_size
        self.shard_numel = self.padded_numel // world_size
        self.compute_dtype = compute_dtype
        self.device = device

        flat = torch.zeros(self.padded_numel, dtype=torch.float32, device=device)
        with torch.no_grad():
            for slot, (_, _, _, p) in zip(self.slots, params, strict=True):
                flat[slot.offset : slot.offset + slot.numel].copy_(p.detach().reshape(-1))
        self._init_flat = flat  # consumed by take_initial_flat()
        start = rank * self.shard_numel
        self.shard = nn.Parameter(flat[start : start + self.shard_numel].clone())

        # Remove the original parameters: from now on the module sees views of `full`.
        for slot in self.slots:
            del slot.module._parameters[slot.attr]
        self.full = torch.empty(
            self.padded_numel, dtype=compute_dtype, device=device, requires_grad=True
        )
        self.free_full()

    # -- initial state -------------------------------------------------------------------
    def take_initial_flat(self) -> torch.Tensor:
        """The unsharded fp32 buffer built at construction (once; for broadcast/no_shard)."""
        flat = self._init_flat
        del self._init_flat
        return flat

    # -- storage of the full buffer --------------------------------------------------------
    @property
    def is_gathered(self) -> bool:
        return self.full.untyped_storage().size() > 0

    def alloc_full(self) -> torch.Tensor:
        """Re-grow the full buffer's storage; return a non-autograd alias to write into."""
        storage = self.full.untyped_storage()
        nbytes = self.padded_numel * self.full.element_size()
        if storage.size() != nbytes:
            storage.resize_(nbytes)
        # `.data` is an alias without autograd history or a shared version counter: the
        # collective writes through it without invalidating tensors saved for backward.
        return self.full.data

    def free_full(self) -> None:
        self.full.untyped_storage().resize_(0)

    # -- views ---------------------------------------------------------------------------
    def bind_views(self) -> None:
        """Point each module attribute at a fresh view of ``full`` (records autograd edges).

        One ``split`` for all parameters, not one slice each: in backward a slice's gradient
        is a zero-filled buffer of the whole unit with the slice copied in (one per
        parameter, then summed), while a split's gradient is one concatenation. With ~26
        parameters per unit the slices cost more than the unit's matrix multiplies."""
        sizes = [slot.numel for slot in self.slots]
        pieces = self.full.split([*sizes, self.padded_numel - self.numel])
        for slot, piece in zip(self.slots, pieces, strict=False):
            setattr(slot.module, slot.attr, piece.view(slot.shape))

    @property
    def full_bytes(self) -> int:
        return self.padded_numel * self.full.element_size()

    @property
    def shard_bytes(self) -> int:
        return self.shard_numel * self.shard.element_size()

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Split an unsharded flat buffer into ``{fqn: tensor}`` (copies)."""
        return {
            s.fqn: flat[s.offset : s.offset + s.numel].view(s.shape).clone() for s in self.slots
        }
