"""A plain install runs (issue 40 point 2): ``pip install .`` with no extras, in a fresh
virtual environment, as a user installs it (torch 2.13.0 first, the CPU build pinned), gives
working ``analyze``, ``diagnose``, ``whatif``, ``dashboard`` and ``--perfetto`` on the shipped
runs; the extras only add what their names say (no Dask, HTA or test tools without them).

CI runs it with the suite (``scripts/test.sh``). Its cost, the three tests on the shared
2-core development VM with pip's cache warm (``pytest tests/test_plain_install.py``): 72 s
wall and 52 s of CPU, or 153 s wall and 89 s under the neighbours' load; most of it is pip
installing torch.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from overlapscope.cli import main
from tests.conftest import REPO

RUN = REPO / "traces" / "backward_pre"  # a shipped run: the engine's, 2 ranks, with run.json
GPU_RUN = REPO / "traces" / "gpu-engine-nccl-none"  # a shipped GPU trace (for --hta)
SOURCES = ("pyproject.toml", "README.md", "overlapscope", "dashboards")


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with overlapscope installed from a copy of the sources
    (so that the build leaves nothing in the checkout): its ``bin``."""
    base = tmp_path_factory.mktemp("plain")
    src = base / "src"
    src.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        ignore = (
            {"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}
        )
        copy(REPO / name, src / name, **ignore)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    for what in (["torch==2.13.0"], [str(src)]):
        proc = subprocess.run([*pip, *what], capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, proc.stderr[-3000:]
    return venv / "bin"


def command(plain: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``overlapscope ARGS`` of the plain install, outside the checkout (it cannot import
    the sources from there)."""
    return subprocess.run(
        [str(plain / "overlapscope"), *args], capture_output=True, text=True, timeout=600, cwd=cwd
    )


@pytest.mark.slow
def test_the_commands_run_and_give_the_suites_answers(plain: Path, tmp_path: Path) -> None:
    where = subprocess.run(
        [str(plain / "python"), "-c", "import overlapscope; print(overlapscope.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    assert "site-packages" in where.stdout  # the installed copy, not the checkout
    ours = tmp_path / "ours.json"
    assert main(["analyze", str(RUN), "--json", str(ours), "--no-progress"]) == 0
    for args in (
        ["analyze", str(RUN), "--json", str(tmp_path / "a.json"), "--no-progress"],
        ["diagnose", str(RUN), "--no-progress"],
        ["whatif", str(RUN), "--policy", "backward_pre", "--json", str(tmp_path / "w.json")],
        ["analyze", str(RUN), "--perfetto", str(tmp_path / "p.json.gz"), "--no-progress"],
    ):
        proc = command(plain, tmp_path, *args)
        assert proc.returncode == 0, (args, proc.stderr[-3000:])
        assert "Traceback" not in proc.stderr
    assert (tmp_path / "a.json").read_bytes() == ours.read_bytes()
    assert json.loads((tmp_path / "w.json").read_text())
    assert (tmp_path / "p.json.gz").stat().st_size > 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_the_dashboard_serves(plain: Path, tmp_path: Path) -> None:
    port = _free_port()
    server = subprocess.Popen(
        [str(plain / "overlapscope"), "dashboard", str(RUN), "--port", str(port)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline, pages = time.monotonic() + 120, {}
        while time.monotonic() < deadline and len(pages) < 2:
            for page in ("/", "/_dash-layout"):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{page}", timeout=10) as r:
                        pages[page] = (r.status, r.read())
                except OSError:
                    time.sleep(0.5)
                    break
            assert server.poll() is None, server.stdout.read() if server.stdout else ""
        assert [status for status, _ in pages.values()] == [200, 200]
        assert b"backward_pre" in pages["/_dash-layout"][1]
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.mark.slow
def test_the_extras_are_only_what_their_names_say(plain: Path, tmp_path: Path) -> None:
    """No extra's package comes with the plain install, and each command that needs one
    says which to install, in one line."""
    for module in ("dask", "distributed", "hta", "pytest", "selenium", "viztracer"):
        proc = subprocess.run(
            [str(plain / "python"), "-c", f"import {module}"], capture_output=True, cwd=tmp_path
        )
        assert proc.returncode != 0, f"{module} came with a plain install"
    dask = command(plain, tmp_path, "analyze", str(RUN), "--dask", "local", "--no-cache")
    assert dask.returncode == 2 and dask.stderr.count("\n") == 1, dask.stderr
    assert "pip install 'overlapscope[cluster]'" in dask.stderr
    hta = command(plain, tmp_path, "analyze", str(GPU_RUN), "--hta", "--no-progress")
    assert hta.returncode == 0 and "Traceback" not in hta.stderr, hta.stderr
    assert "HTA not installed (pip install HolisticTraceAnalysis==0.5.0)" in hta.stdout
