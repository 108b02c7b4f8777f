"""The host causes of ``torch_fsdp_capture.py`` (its module doc): the configurations, and what
each puts between the host and the GPU: a slow single-process ``DataLoader``, a ``.item()``
after each block's forward, many small units (a workload's overrides)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import torch
from capture_config import STEPS, Config
from torch import nn

from overlapscope.config import ModelConfig
from overlapscope.engine.workloads import global_batch

# The host's known reasons for a GPU to wait (module doc). "free_running": no sync at the
# step boundary; "loader_ms": host time per sample in the DataLoader's __getitem__;
# "item_per_block": a .item() on each block's output; "model"/"batch": a workload's overrides.
HOST_CAUSES = [
    Config(
        "fsdp2-free-running",
        "fsdp2",
        "FSDP2 default, the host never waits for the GPU at the step boundary "
        "(the reference for the three below)",
        {"free_running": True},
    ),
    Config(
        "fsdp2-slow-loader",
        "fsdp2",
        "a DataLoader (num_workers=0) whose every sample takes 1 ms of host time: "
        "the GPU waits for the next batch",
        {"free_running": True, "loader_ms": 1.0},
    ),
    Config(
        "fsdp2-item-per-block",
        "fsdp2",
        "a .item() on each block's forward output (a logged metric): "
        "the host waits for the GPU, then the GPU for the host",
        {"free_running": True, "item_per_block": True},
    ),
    Config(
        "fsdp2-many-small-units",
        "fsdp2",
        "32 blocks of width 128 at batch 2: the host's launches cannot keep the GPU busy",
        {
            "free_running": True,
            "model": {"layers": 32, "dim": 128, "heads": 2, "seq_len": 128},
            "batch": 2,
        },
    ),
]


class SlowSamples(torch.utils.data.Dataset):
    """Token rows, each costing ``ms`` of host time (decoding, augmentation, a slow disk)."""

    def __init__(self, cfg: ModelConfig, n: int, ms: float) -> None:
        self.cfg, self.n, self.ms = cfg, n, ms

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.ms / 1e3)
        g = torch.Generator().manual_seed(i)
        tokens = torch.randint(0, self.cfg.vocab, (self.cfg.seq_len + 1,), generator=g)
        return tokens[:-1], tokens[1:]


def batches(model_cfg: ModelConfig, cfg: Config, batch: int) -> Iterator[Any]:
    """The steps' (x, y): from a slow DataLoader where the configuration has one."""
    ms = cfg.options.get("loader_ms")
    if not ms:
        return (global_batch(model_cfg, batch, step, seed=0) for step in range(STEPS))
    data = SlowSamples(model_cfg, STEPS * batch, ms)
    return iter(torch.utils.data.DataLoader(data, batch_size=batch, num_workers=0))


def item_after_each_block(model: nn.Module) -> None:
    def hook(_module: nn.Module, _inputs: Any, output: torch.Tensor) -> None:
        float(output.detach().float().abs().mean().item())  # a logged metric: a host sync

    for block in model.blocks:  # type: ignore[union-attr]
        block.register_forward_hook(hook)
