"""What ``torch_fsdp_capture.py`` runs: its configurations of torch FSDP2 and FSDP1 (prefetch
on and off), what one is, and how many steps each trains and profiles (the host causes'
configurations, ``host_causes.py``, are ones too)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from overlapscope.config import ProfileWindow

STEPS = 5
WINDOW = ProfileWindow(wait=2, warmup=1, active=2)  # step 0 is FSDP's lazy init


@dataclass(frozen=True)
class Config:
    name: str
    framework: str  # fsdp1 | fsdp2
    what: str  # one line for the README
    options: dict[str, Any] = field(default_factory=dict)


CONFIGS = [
    Config(
        "fsdp2-default",
        "fsdp2",
        "fully_shard per block; default (implicit) backward prefetch of the next block",
    ),
    Config(
        "fsdp2-noprefetch",
        "fsdp2",
        "backward prefetch switched off (no public switch: "
        "FSDPParamGroup._backward_prefetch made a no-op)",
        {"backward_prefetch": False},
    ),
    Config(
        "fsdp2-explicit",
        "fsdp2",
        "set_modules_to_backward_prefetch (2 blocks ahead) and "
        "set_modules_to_forward_prefetch (1 ahead)",
        {"depth": 2, "forward": True},
    ),
    Config(
        "fsdp1-backward-pre",
        "fsdp1",
        "FULL_SHARD, BackwardPrefetch.BACKWARD_PRE",
        {"backward_prefetch": "BACKWARD_PRE"},
    ),
    Config(
        "fsdp1-none", "fsdp1", "FULL_SHARD, backward_prefetch=None", {"backward_prefetch": None}
    ),
    Config(
        "fsdp1-forward-prefetch",
        "fsdp1",
        "FULL_SHARD, BACKWARD_PRE, forward_prefetch=True, limit_all_gathers=True",
        {"backward_prefetch": "BACKWARD_PRE", "forward": True},
    ),
]
