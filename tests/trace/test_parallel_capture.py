"""``scripts/parallel_capture.py``, the fixtures' recipe, run for real (4 gloo processes of
HSDP): the traces it writes are read as a job of several process groups, every collective of
2 ranks, with no clock warning (issue 44 point 7)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from overlapscope.analysis import analyze
from overlapscope.trace.run.loader import load_run
from tests.conftest import REPO, free_port


@pytest.mark.multirank
@pytest.mark.slow
def test_capture_script_makes_an_hsdp_job(tmp_path: Path) -> None:
    cmd = [sys.executable, str(REPO / "scripts" / "parallel_capture.py"), "--out", str(tmp_path),
           "--only", "hsdp", "--port", str(free_port())]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    a = analyze(load_run(tmp_path / "hsdp"))
    assert set(a.collectives["group"].astype(str)) == {
        "mesh_shard[0,1]",
        "mesh_shard[2,3]",
        "mesh_replicate[0,2]",
        "mesh_replicate[1,3]",
    }
    assert (a.collectives["num_ranks"] == 2).all()
    assert set(a.units["phase"].astype(str)) >= {"ag_fwd", "ag_bwd", "rs", "ar_rep"}
    assert not [w for w in a.warnings if "clock" in w or "causality" in w]
