"""Profile small real CPU/gloo jobs of several process groups: the fixtures of
``traces/parallel-*`` (docs/ANALYSIS.md, "Process groups, dimensions and matching").

    python scripts/parallel_capture.py --out /tmp/parallel            # every layout
    python scripts/parallel_capture.py --out /tmp/parallel --only hsdp

Layouts (torch's own APIs, on a tiny transformer of 4 blocks, each an FSDP unit):

* ``fsdp2``: ``fully_shard`` over 2 ranks;
* ``hsdp``: ``fully_shard`` on a (replicate 2, shard 2) device mesh, 4 ranks;
* ``fsdp-tp``: a (dp 2, tp 2) mesh, ``ColwiseParallel`` / ``RowwiseParallel`` on each block's
  MLP, then ``fully_shard`` over dp, 4 ranks;
* ``fsdp-tp-sp``: the same with sequence parallel (``SequenceParallel`` on the norm, the MLP's
  input and output sharded on the sequence).

Each rank is its own process (gloo on loopback), profiled with ``torch.profiler``
(``record_shapes``) for steps 2 and 3 of 4 and written as ``OUT/<layout>/rank-K.pt.trace.json.gz``
(``export_chrome_trace``, gzipped); ``OUT/<layout>/capture.json`` says what ran.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

LAYOUTS = {"fsdp2": 2, "hsdp": 4, "fsdp-tp": 4, "fsdp-tp-sp": 4}
DIM, HIDDEN, SEQ, BATCH, BLOCKS, STEPS = 64, 256, 16, 2, 4, 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.attn = nn.Linear(DIM, DIM)
        self.up = nn.Linear(DIM, HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x)
        return x + self.down(torch.relu(self.up(self.norm(x))))


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = nn.Linear(DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _parallelize(model: Tiny, layout: str, world: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if layout == "fsdp2":
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("shard",))
        for b in model.blocks:
            fully_shard(b, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return
    if layout == "hsdp":
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
        for b in model.blocks:
            fully_shard(b, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    sp = layout == "fsdp-tp-sp"
    for b in model.blocks:
        plan = {
            "up": ColwiseParallel(input_layouts=Shard(1)) if sp else ColwiseParallel(),
            "down": RowwiseParallel(output_layouts=Shard(1)) if sp else RowwiseParallel(),
        }
        if sp:
            plan["norm"] = SequenceParallel()
        parallelize_module(b, mesh["tp"], plan)
        fully_shard(b, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])


def _rank_main(rank: int, layout: str, world: int, out: str, port: int) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = Tiny()
    _parallelize(model, layout, world)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.manual_seed(1 + rank // 2 if layout != "fsdp2" else 1 + rank)
    x = torch.randn(BATCH, SEQ, DIM)
    if layout.startswith("fsdp-tp"):
        torch.manual_seed(1 + rank // 2)  # both TP ranks of a dp rank see its batch
        x = torch.randn(BATCH, SEQ, DIM)
    from torch.profiler import ProfilerActivity, profile, schedule

    final = Path(out) / f"rank-{rank}.pt.trace.json.gz"

    def ready(prof: profile) -> None:
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            raw = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(raw))
            part = final.with_name(final.name + ".partial")
            with raw.open("rb") as src, gzip.open(part, "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst)
        os.replace(part, final)

    sched = schedule(wait=1, warmup=1, active=2, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched, on_trace_ready=ready,
                 record_shapes=True) as prof:  # fmt: skip
        for _ in range(STEPS):
            loss = model(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--only", choices=sorted(LAYOUTS), action="append")
    ap.add_argument("--port", type=int, default=29611)
    args = ap.parse_args()
    for i, layout in enumerate(args.only or LAYOUTS):
        world = LAYOUTS[layout]
        out = args.out / layout
        out.mkdir(parents=True, exist_ok=True)
        mp.spawn(_rank_main, args=(layout, world, str(out), args.port + i), nprocs=world)
        meta = {
            "layout": layout, "world_size": world, "steps": STEPS, "profiled_steps": [2, 3],
            "model": {"blocks": BLOCKS, "dim": DIM, "hidden": HIDDEN, "seq": SEQ,
                      "batch": BATCH},
            "versions": {"torch": torch.__version__, "python": platform.python_version()},
            "command": "python scripts/parallel_capture.py --out OUT --only " + layout,
        }  # fmt: skip
        (out / "capture.json").write_text(json.dumps(meta, indent=1) + "\n")
        print(f"{out}: {world} ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
