# Wrap your own model with overlapscope's engine. Run: torchrun --nproc-per-node 2 examples/custom_model.py OUT_DIR
import sys

import torch
import torch.distributed as dist
from torch import nn

from overlapscope.engine import EngineConfig, ShardedModel
from overlapscope.trace.capture import ProfileWindow, RankProfiler

dist.init_process_group("gloo")  # "nccl" on GPUs (then move the model to the rank's GPU)
model = nn.Sequential(*[nn.Sequential(nn.Linear(512, 512), nn.GELU()) for _ in range(4)])
sharded = ShardedModel(
    model, units=["0", "1", "2", "3"], config=EngineConfig(policy="backward_pre")
)
opt = torch.optim.AdamW(sharded.parameters(), lr=1e-3)
with RankProfiler(
    sys.argv[1], dist.get_rank(), ProfileWindow(wait=1, warmup=1, active=2), cuda=False
) as prof:
    for _step in range(4):
        loss = sharded(torch.randn(32, 512)).square().mean()
        loss.backward()
        sharded.optimizer_step(opt)
        opt.zero_grad()
        prof.step()
sharded.close()
dist.destroy_process_group()
