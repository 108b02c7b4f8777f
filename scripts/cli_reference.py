"""Writes docs/CLI.md from the parsers: the text of ``overlapscope --help`` and of each
command's ``--help``, at a fixed width (``COLUMNS=100``), under a short introduction.

    python scripts/cli_reference.py > docs/CLI.md

``tests/test_cli_reference.py`` checks that docs/CLI.md is what this writes and that each
block is what the command prints.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WIDTH = "100"
INTRO = """\
# Command-line reference

Generated from the parsers by `python scripts/cli_reference.py > docs/CLI.md`; each block is
what `COLUMNS=100 overlapscope ... --help` prints (`tests/test_cli_reference.py`). The engine's
flags (`run`, `sweep`, some of `whatif`) and the lab benchmark's are the fields of their
configurations (`overlapscope/config.py`, `overlapscope/bench/collectives.py`), each declared
with its help, range, choices and unit beside the value it sets.

Every command follows the same rules. Errors are one line naming the file or flag and the fix
(exit status 2); `--traceback` shows the full traceback. No command writes over one of its
inputs; `--force` replaces only a run or sweep overlapscope wrote, once the new one is
complete; Ctrl-C or SIGTERM stops every rank and keeps what was written in `DIR.failed/` (a
fresh `DIR.failed-N` beside an earlier one). Each guarantee and the test that proves it:
[RELIABILITY.md](RELIABILITY.md).

What the figures mean: [ANALYSIS.md](ANALYSIS.md); the engine `run` drives:
[ENGINE.md](ENGINE.md); the dashboard: [DASHBOARD.md](DASHBOARD.md); the lab
`bench-collectives` and `--link-gbit` use: [LAB.md](LAB.md); the what-if: [WHATIF.md](WHATIF.md).
"""


def helps() -> dict[str, str]:
    """``{"overlapscope": its --help, "overlapscope CMD": CMD's --help, ...}``."""
    os.environ["COLUMNS"] = WIDTH  # (argparse wraps at the terminal's width)
    from overlapscope.cli import build_parser

    parser, _ = build_parser(every=True)
    found = {"overlapscope": parser.format_help()}
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():  # type: ignore[attr-defined]
        found[f"overlapscope {name}"] = p.format_help()
    return found


def reference() -> str:
    parts = [INTRO]
    for title, text in helps().items():
        parts.append(f"\n## `{title}`\n\n```text\n{text.rstrip()}\n```\n")
    return "".join(parts)


if __name__ == "__main__":
    sys.stdout.write(reference())
