"""Every output of ``overlapscope analyze`` on the shipped runs and the shared external
traces, as SHA-256 digests: what ``tests/golden/test_outputs.py`` compares today's outputs
with (the JSON report, every CSV table, the Markdown report, the text report and stderr).

The digests in ``digests.json`` were first made by main at 1d6a27d (before the analysis was
one pipeline, issue 31), and are made again, with the reason in the commit, when a change is
meant to change an output (``git log -p tests/golden/digests.json``)::

    python -m tests.golden.outputs > tests/golden/digests.json   # from the repository root

Run it again (and review the diff of the figures it changes) only when a change is meant
to change an output.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sys
import tempfile
from pathlib import Path

from overlapscope.cli import main

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(
    f"traces/{p.name}" for p in (REPO / "traces").iterdir() if (p / "run.json").is_file()
)
EXTERNAL_DIR = "../shared/external-traces"
EXTERNAL = (
    sorted(p.name for p in (REPO / EXTERNAL_DIR).glob("*.json.gz"))
    if (REPO / EXTERNAL_DIR).is_dir()
    else []
)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


ANALYZE = ("analyze", "{path}", "--json", "{out}/r.json", "--csv", "{out}/csv")
ANALYZE_FLAGS = ("--markdown", "{out}/r.md", "--no-progress")
DIAGNOSE = ("diagnose", "{path}", "--no-progress")
WHATIF = ("whatif", "{path}", "--policy", "backward_pre", "--json", "{out}/w.json")


def outputs(command: tuple[str, ...], path: str) -> dict[str, str]:
    """{output name: digest} of ``overlapscope`` ``command`` (``{path}``: the input,
    ``{out}``: a temporary folder for its files) run from the repository root (a report
    names its inputs by the paths given)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        stdout, stderr = io.StringIO(), io.StringIO()
        argv = [a.format(path=path, out=out) for a in command]
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            rc = main(argv)
        found = {"rc": str(rc), "stdout": digest(stdout.getvalue().encode())}
        found["stderr"] = digest(stderr.getvalue().encode())
        for f in sorted(out.rglob("*")):
            if f.is_file():
                found[str(f.relative_to(out))] = digest(f.read_bytes())
    return found


def cases() -> list[tuple[tuple[str, ...], str]]:
    """(command, input) of every output compared."""
    analyze = (*ANALYZE, *ANALYZE_FLAGS)
    runs = [*SHIPPED, *(f"{EXTERNAL_DIR}/{n}" for n in EXTERNAL)]
    return [
        *((analyze, p) for p in runs),
        ((*analyze, "--no-align"), SHIPPED[0]),
        *((DIAGNOSE, p) for p in SHIPPED),
        *((WHATIF, p) for p in SHIPPED),
    ]


def key(command: tuple[str, ...], path: str) -> str:
    return " ".join(a.format(path=path, out="OUT") for a in command)


if __name__ == "__main__":
    import os

    os.chdir(REPO)
    json.dump({key(c, p): outputs(c, p) for c, p in cases()}, sys.stdout, indent=1)
    sys.stdout.write("\n")
