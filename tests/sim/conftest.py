"""Real torch FSDP1 / FSDP2 runs (2 gloo ranks, tests/trace/torch_fsdp_run.py), made once per
session for the what-if tests that read them."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def torch_fsdp_runs(fsdp1_run: Path, fsdp2_run: Path) -> dict[str, Path]:
    """The session's torch FSDP runs (tests/conftest.py), by kind."""
    return {"fsdp1": fsdp1_run, "fsdp2": fsdp2_run}
