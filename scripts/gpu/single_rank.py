"""One-rank process group for the GPU checks' Python parts (``engine_checks.py``,
``torch_fsdp_capture.py``): NCCL on ``cuda:0``, or gloo on the CPU."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist


def start(device: str, prog: str, port_base: int) -> torch.device | None:
    """Initialise world size 1 on ``device`` ("cuda" or "cpu"); None (after one line on
    stderr) where CUDA was asked for and there is none."""
    if device == "cuda" and not torch.cuda.is_available():
        print(
            f"{prog}: no CUDA device (torch.cuda.is_available() is False); run it on a machine "
            "with an NVIDIA GPU, or pass --device cpu",
            file=sys.stderr,
        )
        return None
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port_base + os.getpid() % 1000))
    dev = torch.device(device, 0) if device == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=0, world_size=1)
    return dev
