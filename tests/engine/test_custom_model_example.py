"""The README's own-model example runs as documented (torchrun, 2 ranks) and its traces
carry every unit's ranges."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.multirank


def test_custom_model_example(tmp_path: Path) -> None:
    example = REPO / "examples" / "custom_model.py"
    assert len(example.read_text().splitlines()) <= 30
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(example),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        with gzip.open(tmp_path / f"rank-{rank}.pt.trace.json.gz") as f:
            doc = json.loads(f.read())
        names = {e["name"] for e in doc["traceEvents"] if e.get("ph") == "X"}
        for unit in "0123":
            assert {f"ovs/ag_bwd/{unit}", f"ovs/bwd/{unit}", f"ovs/rs/{unit}"} <= names
