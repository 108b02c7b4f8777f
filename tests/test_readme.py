"""The README is the user's entry point: its two commands and its example must match the code;
it indexes the manual (docs/)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

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


def test_readme_is_short_and_indexes_every_doc() -> None:
    """At most 200 lines; every page of docs/ linked from its index; the CLI reference is
    docs/CLI.md (generated from --help: tests/test_cli_reference.py), not repeated here."""
    assert len(README.splitlines()) <= 200
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"](docs/{page.name})" in README, f"README's index lacks docs/{page.name}"
    assert "--allow-missing-ranks" not in README


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
