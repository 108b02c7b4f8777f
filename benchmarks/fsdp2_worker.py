"""One rank of the FSDP2 baseline: the engine's GPT trained with ``torch`` ``fully_shard``.

Started by torchrun (locally, or one per lab namespace) from ``benchmarks/engine_bench.py``::

    torchrun ... benchmarks/fsdp2_worker.py OUT_DIR CONFIG_JSON

``CONFIG_JSON`` is an ``overlapscope`` run config (``RunConfig.to_dict()``): the same model,
seed, global batch, steps and profiler window as an ``overlapscope run``. Each block and then
the root are wrapped with ``fully_shard`` (FSDP2's default: reshard after forward, prefetch
of the next block's all-gather in backward). Step time is measured exactly as the engine's
worker does (``perf_counter`` around batch, forward, backward, optimizer step, zero_grad),
and peak memory the same way on CPU: the largest ``Total Allocated`` of the profiler's memory
events over the profiled window (``overlapscope.trace.capture.RankProfiler``). Rank 0 writes
``OUT_DIR/fsdp2.json`` with ``step_time_us`` and ``peak_mem_bytes`` per rank.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from overlapscope.config import RunConfig
from overlapscope.engine.workloads import build_model, global_batch, local_rows
from overlapscope.trace.capture import RankProfiler


def train(cfg: RunConfig, out_dir: Path) -> None:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(cfg.threads_per_rank)
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (world,))

    model, units = build_model(cfg.model, cfg.seed)
    for name in units:  # one FSDP unit per engine unit, then the root (same grouping)
        fully_shard(model.get_submodule(name), mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)

    step_us: list[float] = []
    with RankProfiler(out_dir, rank, cfg.window, cuda=False) as prof:
        for step in range(cfg.steps):
            t0 = time.perf_counter()
            x, y = global_batch(cfg.model, cfg.global_batch, step, cfg.seed)
            x, y = local_rows(x, rank, world), local_rows(y, rank, world)
            loss = model(x, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step_us.append((time.perf_counter() - t0) * 1e6)
            prof.step()

    mine = {"step_time_us": step_us, "peak_mem_bytes": int(prof.peak_mem_bytes)}
    per_rank: list[object] = [None] * world
    dist.all_gather_object(per_rank, mine)
    if rank == 0:
        result = {
            "step_time_us": [r["step_time_us"] for r in per_rank],  # type: ignore[index]
            "peak_mem_bytes": [r["peak_mem_bytes"] for r in per_rank],  # type: ignore[index]
            "profiled_steps": cfg.window.active_steps(),
            "final_loss": float(loss.detach()),
        }
        (out_dir / "fsdp2.json").write_text(json.dumps(result, indent=1) + "\n")
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: fsdp2_worker.py OUT_DIR CONFIG_JSON", file=sys.stderr)
        return 2
    out_dir = Path(argv[0])
    cfg = RunConfig.from_dict(json.loads(Path(argv[1]).read_text()))
    train(cfg, out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
