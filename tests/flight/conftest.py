"""Real Flight Recorder dumps from real gloo runs (tests/flight/gloo_run.py), made once per
test session: FSDP2 on 2 ranks with a profiler trace beside, FSDP1 on 4 ranks, FSDP2 with
rank 1 slowed before layer 1's forward, and FSDP2 where rank 1 stops before the last
collective (the others' collective times out)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "tests" / "flight" / "gloo_run.py"


def make_run(out: Path, kind: str, *flags: str) -> Path:
    subprocess.run(
        [sys.executable, str(SCRIPT), kind, str(out), *flags],
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=240,
    )
    return out


@pytest.fixture(scope="session")
def fsdp2_profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("fr") / "fsdp2", "fsdp2", "--profile")


@pytest.fixture(scope="session")
def fsdp1_four(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("fr") / "fsdp1x4", "fsdp1", "--ranks", "4")


@pytest.fixture(scope="session")
def slow_rank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fr") / "slow"
    return make_run(out, "fsdp2", "--steps", "8", "--slow-rank", "1")


@pytest.fixture(scope="session")
def hang(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("fr") / "hang", "fsdp2", "--hang-rank", "1")
