"""Real torch FSDP1 / FSDP2 CPU runs (2 gloo ranks), made once per test session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "trace" / "torch_fsdp_run.py"


def make(kind: str, out: Path) -> Path:
    subprocess.run(
        [sys.executable, str(SCRIPT), kind, str(out)], check=True, capture_output=True, timeout=240
    )
    return out


@pytest.fixture(scope="session")
def fsdp2_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make("fsdp2", tmp_path_factory.mktemp("fsdp2"))


@pytest.fixture(scope="session")
def fsdp1_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make("fsdp1", tmp_path_factory.mktemp("fsdp1"))
