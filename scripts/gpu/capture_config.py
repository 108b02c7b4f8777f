"""What ``torch_fsdp_capture.py`` runs: a configuration, and how many steps (shared with
``host_causes.py``)."""

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
