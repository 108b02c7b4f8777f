"""Units: how a model's parameters are split into sharded units at wrap time.

Each named submodule becomes one :class:`Unit` owning a :class:`FlatParam` of its parameters
(inner units override outer ones); parameters outside every named unit form the root unit.
Used by :class:`~overlapscope.engine.sharded.ShardedModel` when it wraps a model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from overlapscope.engine.comm import PendingGrad, Work
from overlapscope.engine.flat_param import FlatParam
from overlapscope.phases import Phase
from overlapscope.trace.naming.ranges import ROOT_UNIT


@dataclass(eq=False)
class Unit:
    name: str
    module: nn.Module
    flat: FlatParam | None
    is_root: bool = False
    ag_work: Work | None = None  # all-gather in flight
    ag_phase: Phase | None = None
    ag_src: torch.Tensor | None = None  # the all-gather's input, alive until it is done
    pending_grad: PendingGrad | None = None
    grad_phase: Phase | None = None
    bwd_started: bool = False


_Param = tuple[str, nn.Module, str, nn.Parameter]


def build_units(
    model: nn.Module,
    names: list[str],
    *,
    rank: int,
    world_size: int,
    compute_dtype: torch.dtype,
    device: torch.device,
) -> list[Unit]:
    """One unit per name in ``names`` (a submodule path), plus the root unit (first).

    ``rank``/``world_size`` say which shard this rank keeps (``0``/``1`` keeps everything).
    Every rank starts from rank 0's parameters (a one-time broadcast per unit)."""
    modules = _named_modules(model, names)
    units: list[Unit] = []
    for name, params in _params_per_unit(model, modules, names).items():
        flat = None
        if params:
            flat = FlatParam(
                params,
                rank=rank,
                world_size=world_size,
                compute_dtype=compute_dtype,
                device=device,
            )
            _sync_initial_shard(flat)
        module = model if name == ROOT_UNIT else modules[name]
        units.append(Unit(name, module, flat, is_root=name == ROOT_UNIT))
    return units


def _named_modules(model: nn.Module, names: list[str]) -> dict[str, nn.Module]:
    modules: dict[str, nn.Module] = {}
    for name in names:
        if name in ("", ROOT_UNIT) or "/" in name:
            raise ValueError(f"unit name {name!r}: name a submodule path such as 'blocks.0'")
        try:
            modules[name] = model.get_submodule(name)
        except AttributeError:
            raise ValueError(f"unit {name!r} is not a submodule of the model") from None
    return modules


def _params_per_unit(
    model: nn.Module, modules: dict[str, nn.Module], names: list[str]
) -> dict[str, list[_Param]]:
    """Each parameter's owning unit (the innermost named one, else the root); no tied ones."""
    owner: dict[int, str] = {}
    for name in sorted(modules, key=lambda n: n.count(".")):  # outer units first
        for p in modules[name].parameters():
            owner[id(p)] = name  # inner units override outer ones
    seen: set[int] = set()
    per_unit: dict[str, list[_Param]] = {n: [] for n in [ROOT_UNIT, *names]}
    for mod_name, mod in model.named_modules(remove_duplicate=False):
        for attr, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) in seen:
                raise ValueError(
                    f"parameter {mod_name}.{attr} is shared (tied); overlapscope's engine "
                    "does not support tied parameters: untie them"
                )
            seen.add(id(p))
            fqn = f"{mod_name}.{attr}" if mod_name else attr
            per_unit[owner.get(id(p), ROOT_UNIT)].append((fqn, mod, attr, p))
    return per_unit


def _sync_initial_shard(flat: FlatParam) -> None:
    # One-time, before training: every rank starts from rank 0's parameters.
    full = flat.take_initial_flat()
    if full.is_cuda and dist.get_backend() == "gloo":
        # gloo moves host memory: broadcast a host copy (once, before training)
        host = full.cpu()
        dist.broadcast(host, src=0)
        full.copy_(host)
    else:
        dist.broadcast(full, src=0)
    start = flat.rank * flat.shard_numel
    with torch.no_grad():
        flat.shard.copy_(full[start : start + flat.shard_numel])
