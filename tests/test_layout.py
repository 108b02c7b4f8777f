"""The project's size rules, kept true: no file over 400 lines and no function over 60 in
the package, the dashboard, scripts and benchmarks (STYLE.md, issue 14 point 7)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DIRS = ("overlapscope", "dashboards", "scripts", "benchmarks")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


def _sources() -> list[Path]:
    return sorted(p for d in DIRS for p in (REPO / d).rglob("*.py"))


def offenders(path: Path, root: Path = REPO) -> list[str]:
    """``path:line name: N lines`` for each function over the limit, and the file itself."""
    text = path.read_text()
    rel = path.relative_to(root)
    found = []
    num_lines = len(text.splitlines())
    if num_lines > MAX_FILE_LINES:
        found.append(f"{rel}: {num_lines} lines (> {MAX_FILE_LINES})")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - start + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
    return found


def test_sources_found() -> None:
    assert len(_sources()) > 50  # the checker looks at the real tree


def test_no_long_files_or_functions() -> None:
    found = [o for p in _sources() for o in offenders(p)]
    assert not found, "over the size limits:\n" + "\n".join(found)


def test_checker_names_an_offender(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    bad = tmp_path / "probe.py"
    bad.write_text(f"def long():\n{body}\n" + "\n" * MAX_FILE_LINES)
    assert offenders(bad, tmp_path) == [
        f"probe.py: {MAX_FILE_LINES + MAX_FUNCTION_LINES + 1} lines (> {MAX_FILE_LINES})",
        f"probe.py:1 long: {MAX_FUNCTION_LINES + 1} lines",
    ]
