"""The README is the user's entry point: its two commands, its CLI reference and its example
must match the code."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
from pathlib import Path

import pytest

from overlapscope.cli import build_parser
from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def code_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)]


def test_quick_start_is_two_commands_and_ci_runs_the_test_one() -> None:
    blocks = code_blocks(README)
    assert "scripts/demo.sh" in blocks
    assert "scripts/test.sh" in blocks
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^exec scripts/test\.sh$", ci, flags=re.M), ci
    for script in ("demo.sh", "test.sh", "setup.sh"):
        assert os.access(REPO / "scripts" / script, os.X_OK)


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser, _ = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_cli_reference_names_every_command_and_flag() -> None:
    for name, sub in _subparsers().items():
        assert f"overlapscope {name}" in README, name
        for action in sub._actions:
            for opt in action.option_strings:
                if opt.startswith("--") and opt != "--help":
                    assert opt in README, f"README does not document {name} {opt}"


def test_readme_example_is_the_tested_example_file() -> None:
    example = (REPO / "examples" / "custom_model.py").read_text()
    snippet = next(b for b in code_blocks(README) if "ShardedModel(" in b)
    assert snippet in example


@pytest.mark.slow
@pytest.mark.multirank
def test_demo_command_profiles_analyses_and_serves(tmp_path: Path) -> None:
    """The README's main command, end to end (the dashboard is fetched once, then stopped)."""
    if not (REPO / ".venv" / "bin" / "overlapscope").exists():
        pytest.skip("scripts/demo.sh runs in the project's .venv; run scripts/test.sh to create it")
    proc = subprocess.run(
        [str(REPO / "scripts" / "demo.sh"), "--check"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "step 6/6" in proc.stdout
    assert "dashboard answered" in proc.stdout
    assert (REPO / "runs" / "quickstart" / "run.json").exists()
