"""The one-line error when the lab cannot run: real checks, with identity or PATH changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from overlapscope.errors import UserError
from overlapscope.lab import check_lab_available
from tests.lab.support import needs_lab, root_state

REPO = Path(__file__).resolve().parents[2]


def test_non_root_is_refused_with_the_fix() -> None:
    with pytest.raises(UserError) as e:
        check_lab_available(euid=1000)
    msg = str(e.value)
    assert "\n" not in msg
    assert "needs root" in msg and "drop --link-gbit" in msg


@pytest.mark.skipif(shutil.which("ip") is None, reason="needs `ip` to build a PATH without `tc`")
def test_missing_tc_is_refused_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "ip").symlink_to(shutil.which("ip") or "")
    with pytest.raises(UserError, match=r"needs `tc` from iproute2.*apt-get install iproute2"):
        check_lab_available(euid=0, path=str(tmp_path))


def test_missing_ip_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"needs `ip` from iproute2"):
        check_lab_available(euid=0, path=str(tmp_path))


@pytest.mark.skipif(os.geteuid() == 0, reason="checks the real non-root path; this run is root")
def test_real_non_root_is_refused() -> None:
    with pytest.raises(UserError, match="needs root"):
        check_lab_available()


@pytest.mark.root
@needs_lab
def test_available_here_leaves_nothing_behind() -> None:
    before = root_state()
    check_lab_available()
    assert root_state() == before


@pytest.mark.root
@needs_lab
def test_cli_prints_one_line_and_exits_2_without_tc(tmp_path: Path) -> None:
    (tmp_path / "ip").symlink_to(shutil.which("ip") or "")
    proc = subprocess.run(
        [sys.executable, "-m", "overlapscope", "bench-collectives", "--link-gbit", "1"],
        cwd=REPO,
        env={**os.environ, "PATH": str(tmp_path), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("overlapscope: error: --link-gbit needs `tc`")
