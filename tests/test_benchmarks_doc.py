"""docs/BENCHMARKS.md is a manual (issue 31, point 7; issue 41, point 8): each benchmark once,
at most 400 lines, and every section that gives figures names the command that measured them.
No dates: the figures are the current ones, what was measured before is in git
(tests/test_manuals.py)."""

from __future__ import annotations

import re

from tests.conftest import REPO

TEXT = (REPO / "docs" / "BENCHMARKS.md").read_text()


def sections() -> dict[str, str]:
    """{heading: its text up to the next heading}."""
    parts = re.split(r"^(#{2,4} .+)$", TEXT, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_at_most_400_lines_and_each_benchmark_once() -> None:
    assert len(TEXT.splitlines()) <= 400
    headings = list(sections())
    assert len(headings) == len(set(headings)), "a section appears twice"
    assert not any(h.lower().split()[1] in ("latest", "earlier") for h in headings)


def test_every_figure_carries_its_command() -> None:
    for heading, body in sections().items():
        if "|---" not in body:  # no table of figures in this section
            continue
        command = re.search(r"(python |benchmarks/|overlapscope )", heading + body)
        assert command, f"{heading}: figures without the command that measured them"
