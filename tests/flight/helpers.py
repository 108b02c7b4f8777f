"""Rewrite real dumps (plain dicts) for the tests: a field changed, times moved, timing
added; written beside under the same names."""

from __future__ import annotations

import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

Entry = dict[str, Any]


def rewrite(src: Path, dst: Path, edit: Callable[[int, Entry], None]) -> Path:
    """A copy of the run directory ``src`` whose dumps' entries went through ``edit(rank,
    entry)`` (torch's own pickle, read back as plain data and pickled again)."""
    shutil.copytree(src, dst)
    for p in sorted((dst / "comm_traces").iterdir()):
        doc = pickle.loads(p.read_bytes())
        rank = int(p.name.rpartition("_")[2])
        for e in doc["entries"]:
            edit(rank, e)
        p.write_bytes(pickle.dumps(doc, protocol=2))
    return dst


def load_entries(run: Path) -> dict[int, list[Entry]]:
    return {
        int(p.name.rpartition("_")[2]): pickle.loads(p.read_bytes())["entries"]
        for p in sorted((run / "comm_traces").iterdir())
    }
