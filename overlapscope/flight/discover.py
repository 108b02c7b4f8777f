"""Which files are Flight Recorder dumps: those under a run's ``comm_traces/`` (torchtitan's
layout: ``comm_traces/rank_<K>``, ``overlapscope run --flight-recorder`` writes the same),
and the files named directly or found in a directory whose first bytes say so (a pickle, or
JSON that opens with a dump's keys). Kineto traces beside them are left to the trace loader.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

DUMP_DIR = "comm_traces"
# what an overlapscope run or sweep writes beside its traces (trace/run/discover.py's NOT_TRACES)
_NOT_TRACES = frozenset({"run.json", "config.json", "summary.json"})
_PEEK = 256
# a dump's JSON opens with one of its own keys (torch writes them sorted); a Kineto trace
# opens with its schema version or its event list (and holds a "pg_config" of its own)
_FIRST_KEY = re.compile(rb'^\s*\{\s*"(comm_lib_version|entries|pg_config|pg_status|version)"')


def is_dump(path: Path) -> bool:
    """The first bytes of ``path`` are those of a dump (a pickle, or a dump's JSON)."""
    try:
        with path.open("rb") as f:
            head = f.read(_PEEK)
    except OSError:
        return False
    if head[:1] == b"\x80":
        return True
    return _FIRST_KEY.match(head) is not None


def _in_dir(d: Path) -> list[Path]:
    files = [q for q in d.iterdir() if q.is_file() and not q.name.startswith(".")]
    found = [q for q in files if is_dump(q)]
    sub = d / DUMP_DIR
    if sub.is_dir():
        found += [q for q in sub.iterdir() if q.is_file() and not q.name.startswith(".")]
    return found


def find_dumps(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """(the dumps among ``paths``, the paths left for the trace loader): a directory's
    dumps are taken and the directory left too when it holds anything else; a file that
    is a dump is taken."""
    dumps: list[Path] = []
    rest: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = _in_dir(p)
            dumps += found
            others = [
                q for q in p.iterdir()
                if q.is_file() and q not in found and q.name not in _NOT_TRACES
                and q.name.endswith((".json", ".json.gz"))
            ]  # fmt: skip
            if others or not found:
                rest.append(p)
        elif p.is_file() and is_dump(p):
            dumps.append(p)
        else:
            rest.append(p)
    return sorted(set(dumps)), rest
