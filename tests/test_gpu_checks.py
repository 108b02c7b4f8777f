"""The GPU check scripts, where there is no GPU: they stop at once with one line, and their
Python parts run on the CPU (so a lent GPU's minutes are not spent on a script's typo)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPTS = ["scripts/gpu-check-engine.sh", "scripts/gpu-check-torch-fsdp.sh"]
TINY = ["--layers", "2", "--dim", "32", "--heads", "2", "--seq-len", "16", "--vocab", "64"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_without_a_gpu_the_check_stops_at_once_with_one_line(script: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "GPU_CHECK_REHEARSE"}
    env["PATH"] = "/usr/bin:/bin"  # no nvidia-smi
    env["PYTHON"] = sys.executable
    r = subprocess.run([REPO / script, str(out)], capture_output=True, text=True, env=env)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no NVIDIA GPU" in lines[0] and "run it on" in lines[0], r.stderr
    assert r.stdout == "" and not out.exists()


def test_cpu_torch_without_cuda_is_named(tmp_path: Path) -> None:
    """nvidia-smi present but this Python's torch sees no GPU: the message names PYTHON."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:/usr/bin:/bin", "PYTHON": sys.executable}
    env.pop("GPU_CHECK_REHEARSE", None)
    r = subprocess.run([REPO / SCRIPTS[0], str(tmp_path / "o")], capture_output=True, text=True,
                       env=env)  # fmt: skip
    assert r.returncode == 2 and "set PYTHON" in r.stderr and len(r.stderr.splitlines()) == 1


def _names(trace: Path) -> set[str]:
    with gzip.open(trace) as f:
        doc = json.load(f)
    return {str(e.get("name", "")).split(" (")[0] for e in doc["traceEvents"]}


CAPTURE = REPO / "scripts/gpu/torch_fsdp_capture.py"


def _capture(out: Path, *configs: str) -> subprocess.CompletedProcess[str]:
    """The capture script on the CPU with a tiny model, ``configs`` only."""
    return subprocess.run(
        [sys.executable, CAPTURE, "--device", "cpu", "--out", str(out), "--only", *configs,
         *TINY, "--batch", "2"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.multirank
def test_torch_fsdp_capture_issues_the_collectives_torch_skips_at_world_size_one(
    tmp_path: Path,
) -> None:
    """torch skips FSDP's all-gathers at world size 1 (FSDP1: NO_SHARD; FSDP2: its fast
    path); the capture switches that off, so the trace holds FSDP's collectives."""
    r = _capture(tmp_path, "fsdp2-default", "fsdp1-none")
    assert r.returncode == 0, r.stdout + r.stderr
    fsdp2 = _names(tmp_path / "fsdp2-default" / "rank-0.pt.trace.json.gz")
    fsdp1 = _names(tmp_path / "fsdp1-none" / "rank-0.pt.trace.json.gz")
    assert {"FSDP::all_gather", "FSDP::post_backward_reduce"} <= fsdp2
    assert "c10d::_reduce_scatter_base_" in fsdp2 and "c10d::_reduce_scatter_base_" in fsdp1
    assert "FullyShardedDataParallel._pre_forward" in fsdp1 and "c10d::allgather_" in fsdp1
    meta = json.loads((tmp_path / "captures.json").read_text())["configs"]
    assert meta["fsdp2-default"]["world_size_one_shortcuts_switched_off"]
    assert meta["fsdp1-none"]["world_size_one_shortcuts_switched_off"]


@pytest.mark.multirank
def test_engine_checks_run_on_the_cpu(tmp_path: Path) -> None:
    script = REPO / "scripts/gpu/engine_checks.py"
    r = subprocess.run([sys.executable, script, "parity", "--device", "cpu", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads((tmp_path / "parity.json").read_text())["rows"]
    assert len(rows) == 8 + 12 and all(row["ok"] for row in rows)


@pytest.mark.multirank
def test_host_cause_captures_put_their_cause_in_the_trace(tmp_path: Path) -> None:
    """scripts/gpu-check-host-causes.sh's configurations, on the CPU: the slow loader's
    DataLoader and the per-block .item() are in the traces; an unknown name is one line."""
    r = _capture(tmp_path, "fsdp2-slow-loader", "fsdp2-item-per-block")
    assert r.returncode == 0, r.stdout + r.stderr
    loader = _names(tmp_path / "fsdp2-slow-loader" / "rank-0.pt.trace.json.gz")
    item = _names(tmp_path / "fsdp2-item-per-block" / "rank-0.pt.trace.json.gz")
    assert any(n.startswith("enumerate(DataLoader)") for n in loader)
    assert not any(n.startswith("enumerate(DataLoader)") for n in item)
    assert "aten::_local_scalar_dense" in item
    meta = json.loads((tmp_path / "captures.json").read_text())["configs"]
    assert meta["fsdp2-slow-loader"]["step_time_is"] == "host loop"
    bad = _capture(tmp_path / "x", "nope")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--only nope" in bad.stderr and "fsdp2-slow-loader" in bad.stderr
