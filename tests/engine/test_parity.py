"""Parity: the sharded engine trains exactly like one non-sharded process and like FSDP2.

For world sizes 1, 2 and 4, every policy, full_shard and shard_grad_op (and no_shard), with
and without forward prefetch: parameters after 3 optimizer steps on the same global batches.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from overlapscope.config import EngineConfig
from overlapscope.engine.sharded import ShardedModel
from overlapscope.engine.workloads import ModelConfig, build_model, global_batch, local_rows
from tests.conftest import spawn

MODEL = ModelConfig(kind="gpt", layers=3, dim=16, heads=2, seq_len=8, vocab=32)
BATCH = 4
STEPS = 3
POLICIES = ["none", "backward_post", "backward_pre"]
SHARDINGS = ["full_shard", "shard_grad_op", "no_shard"]


def _sgd(params: object) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)  # type: ignore[arg-type]


def reference_params() -> dict[str, torch.Tensor]:
    model, _ = build_model(MODEL, seed=0)
    opt = _sgd(model.parameters())
    for step in range(STEPS):
        x, y = global_batch(MODEL, BATCH, step, seed=0)
        model(x, y).backward()
        opt.step()
        opt.zero_grad()
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def _train_engine(rank: int, world: int, cfg: EngineConfig) -> dict[str, torch.Tensor]:
    model, units = build_model(MODEL, seed=0)
    sharded = ShardedModel(model, units, cfg)
    opt = _sgd(sharded.parameters())
    for step in range(STEPS):
        x, y = global_batch(MODEL, BATCH, step, seed=0)
        sharded(local_rows(x, rank, world), local_rows(y, rank, world)).backward()
        sharded.optimizer_step(opt)
        opt.zero_grad()
    state = sharded.full_state_dict()
    sharded.close()
    return state


def _train_fsdp2(rank: int, world: int) -> dict[str, torch.Tensor]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    model, _ = build_model(MODEL, seed=0)
    for block in model.blocks:  # type: ignore[union-attr]
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = _sgd(model.parameters())
    for step in range(STEPS):
        x, y = global_batch(MODEL, BATCH, step, seed=0)
        model(local_rows(x, rank, world), local_rows(y, rank, world)).backward()
        opt.step()
        opt.zero_grad()
    return {k: v.full_tensor().detach() for k, v in model.named_parameters()}


def _max_err(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _shardings(world: int) -> list[str]:
    """Every sharding on 2 ranks; 1 and 4 ranks change only how full_shard and shard_grad_op
    split the flat parameters (4 ranks on 2 cores is the suite's most expensive spawn)."""
    match world:
        case 2:
            return SHARDINGS
        case 4:
            return SHARDINGS[:1]
        case _:
            return SHARDINGS[:2]


def _worker(rank: int, world: int, out: Path) -> None:
    ref = reference_params()
    errors: dict[str, float] = {}
    fsdp2 = _train_fsdp2(rank, world)
    errors["fsdp2-vs-reference"] = _max_err(fsdp2, ref)
    shardings = _shardings(world)
    for policy, sharding, fwd in itertools.product(POLICIES, shardings, [False, True]):
        cfg = EngineConfig(policy=policy, sharding=sharding, forward_prefetch=fwd)
        got = _train_engine(rank, world, cfg)
        key = f"{policy}/{sharding}/fwd={fwd}"
        errors[f"{key} vs reference"] = _max_err(got, ref)
        errors[f"{key} vs fsdp2"] = _max_err(got, fsdp2)
    dist.barrier()
    if rank == 0:
        torch.save(errors, out)


@pytest.mark.multirank
@pytest.mark.parametrize("world", [1, 2, 4])
def test_parity_with_single_process_and_fsdp2(world: int, tmp_path: Path) -> None:
    out = tmp_path / "errors.pt"
    spawn(_worker, world, out)
    errors: dict[str, float] = torch.load(out)
    shardings = len(_shardings(world))
    assert len(errors) == 1 + 2 * len(POLICIES) * shardings * 2
    bad = {k: v for k, v in errors.items() if not v <= 1e-5}
    assert not bad, bad


def _worker_optim(rank: int, world: int, out: Path) -> None:
    """Any torch.optim optimizer steps on the shards: AdamW matches a plain AdamW.

    eps=1e-3: Adam divides by sqrt(v), which turns float rounding in near-zero gradients
    (summed in another order across ranks) into full-size update differences; a larger eps
    keeps the comparison about the sharding, not about that amplification."""
    model, _ = build_model(MODEL, seed=0)
    opt: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-3)
    for step in range(STEPS):
        x, y = global_batch(MODEL, BATCH, step, seed=0)
        model(x, y).backward()
        opt.step()
        opt.zero_grad()
    ref = {k: v.detach() for k, v in model.named_parameters()}
    model, units = build_model(MODEL, seed=0)
    sharded = ShardedModel(model, units, EngineConfig(policy="backward_pre"))
    opt = torch.optim.AdamW(sharded.parameters(), lr=1e-2, eps=1e-3)
    for step in range(STEPS):
        x, y = global_batch(MODEL, BATCH, step, seed=0)
        sharded(local_rows(x, rank, world), local_rows(y, rank, world)).backward()
        sharded.optimizer_step(opt)
        opt.zero_grad()
    got = sharded.full_state_dict()
    if rank == 0:
        torch.save(_max_err(got, ref), out)


@pytest.mark.multirank
def test_adamw_on_shards_matches_plain_adamw(tmp_path: Path) -> None:
    out = tmp_path / "err.pt"
    spawn(_worker_optim, 2, out)
    assert torch.load(out) <= 1e-5


def _worker_bf16(rank: int, world: int, out: Path) -> None:
    ref = reference_params()
    got = _train_engine(rank, world, EngineConfig(mixed_precision="bf16", policy="backward_pre"))
    model, units = build_model(MODEL, seed=0)
    sharded = ShardedModel(model, units, EngineConfig(mixed_precision="bf16"))
    shard_dtypes = {p.dtype for p in sharded.parameters()}
    full_dtypes = {u.flat.full.dtype for u in sharded.units if u.flat is not None}
    if rank == 0:
        torch.save((_max_err(got, ref), shard_dtypes, full_dtypes), out)


@pytest.mark.multirank
def test_bf16_keeps_fp32_shards_and_trains_close_to_fp32(tmp_path: Path) -> None:
    out = tmp_path / "bf16.pt"
    spawn(_worker_bf16, 2, out)
    err, shard_dtypes, full_dtypes = torch.load(out)
    assert shard_dtypes == {torch.float32}
    assert full_dtypes == {torch.bfloat16}
    # bf16 compute: close to the fp32 reference, but not bit-identical
    assert 0 < err < 2e-2


def _worker_memory_levers(rank: int, world: int, out: Path) -> None:
    ref = reference_params()
    errors: dict[str, float] = {}
    variants = [
        ("full_shard", "all", False),
        ("full_shard", "every-2", True),
        ("full_shard", "none", True),
        ("shard_grad_op", "all", True),
    ]
    for policy in POLICIES:
        for sharding, ckpt, offload in variants:
            cfg = EngineConfig(
                policy=policy, sharding=sharding, checkpoint_units=ckpt, cpu_offload=offload
            )
            key = f"{policy}/{sharding}/ckpt={ckpt}/offload={offload}"
            errors[key] = _max_err(_train_engine(rank, world, cfg), ref)
    if rank == 0:
        torch.save(errors, out)


@pytest.mark.multirank
def test_checkpointing_and_offload_keep_parity(tmp_path: Path) -> None:
    """Activation checkpointing and CPU offload change the timeline, not the maths."""
    out = tmp_path / "errors.pt"
    spawn(_worker_memory_levers, 2, out)
    errors: dict[str, float] = torch.load(out)
    assert len(errors) == len(POLICIES) * 4
    bad = {k: v for k, v in errors.items() if not v <= 1e-5}
    assert not bad, bad
