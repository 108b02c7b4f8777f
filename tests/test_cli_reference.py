"""docs/CLI.md is generated from the parsers (``scripts/cli_reference.py``) and each of its
blocks is what the command's ``--help`` prints (issue 31, point 7)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from types import ModuleType

from tests.conftest import REPO

CLI_MD = REPO / "docs" / "CLI.md"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "cli_reference", REPO / "scripts" / "cli_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_md_is_what_the_parsers_give() -> None:
    assert CLI_MD.read_text() == _generator().reference(), (
        "docs/CLI.md is stale: run python scripts/cli_reference.py > docs/CLI.md"
    )


def test_each_block_is_what_help_prints() -> None:
    blocks = dict(
        re.findall(r"^## `([^`]+)`\n\n```text\n(.*?)\n```$", CLI_MD.read_text(), re.M | re.S)
    )
    assert "overlapscope" in blocks and "overlapscope analyze" in blocks
    env = {**os.environ, "COLUMNS": "100", "PYTHONPATH": str(REPO)}
    for title, text in blocks.items():
        argv = [sys.executable, "-m", "overlapscope", *title.split()[1:], "--help"]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
        assert proc.stdout.rstrip() == text, title
