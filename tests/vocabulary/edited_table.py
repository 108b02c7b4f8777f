"""Run a check on a copy of the package whose phase table has rows added: a row of an enum
cannot be patched in place, so ``overlapscope`` and ``dashboards`` are copied, the one file
edited, and the check runs in a subprocess on the copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import REPO


def with_rows(tmp_path: Path, after: str, rows: str, check: str) -> Any:
    """What ``check`` (Python, given a fresh folder as ``sys.argv[1]``) prints as JSON, run on
    the package with ``rows`` added to the phase table after the row ``after = ...``."""
    pkg = tmp_path / "pkg"
    for name in ("overlapscope", "dashboards"):
        shutil.copytree(REPO / name, pkg / name, ignore=shutil.ignore_patterns("__pycache__"))
    table = pkg / "overlapscope" / "phases.py"
    text = table.read_text()
    anchor = next(
        line for line in text.splitlines(keepends=True) if line.lstrip().startswith(f"{after} =")
    )
    assert text.count(anchor) == 1
    table.write_text(text.replace(anchor, anchor + rows))
    (tmp_path / "run").mkdir()
    env = {**os.environ, "PYTHONPATH": f"{pkg}{os.pathsep}{REPO}"}
    proc = subprocess.run(
        [sys.executable, "-c", check, str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,  # (not the repository: its package would come first)
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
