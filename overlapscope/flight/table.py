"""The entries of every rank's dump as one table, one row per entry (columns
:data:`ENTRY_COLUMNS`).

Times stay in the dumps' nanoseconds (``*_ns``, each rank's own clock, -1 where not
recorded: gloo records the issue only; NCCL records start and completion, and
``duration_ms`` with ``TORCH_NCCL_ENABLE_TIMING=1``), ``duration_us`` is NaN where not
recorded. ``op`` is the collective of ``profiling_name`` without its backend (``gloo:``,
``nccl:``); gloo runs a reduce-scatter as an all-reduce and names it so, which the frames'
phase (frames.py) puts right.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from overlapscope.flight.frames import classify, stack_text
from overlapscope.flight.reader import Dump

ENTRY_COLUMNS = [
    "rank", "record_id", "pg", "pg_desc", "seq", "p2p_seq", "is_p2p", "op", "backend",
    "state", "issue_ns", "start_ns", "end_ns", "duration_us", "input_sizes", "input_dtypes",
    "output_sizes", "output_dtypes", "input_bytes", "framework", "phase", "stack",
    "timeout_ms",
]  # fmt: skip
_DTYPE_BYTES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
    "Char": 1, "Byte": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
}  # fmt: skip


def _ns(v: object) -> int:
    """A time in ns, -1 where not recorded (None in the pickle, 0 in the JSON)."""
    return int(v) if isinstance(v, (int, float)) and v and math.isfinite(v) else -1


def _bytes(sizes: object, dtypes: object) -> int:
    if not isinstance(sizes, list) or not isinstance(dtypes, list):
        return 0
    total = 0
    for shape, dtype in zip(sizes, dtypes, strict=False):
        n = math.prod(int(d) for d in shape) if isinstance(shape, list) else 0
        total += n * _DTYPE_BYTES.get(str(dtype), 0)
    return total


_FRAME_KEY = operator.itemgetter("name", "filename", "line")


class _Stacks:
    """Each distinct stack classified and written out once (a run repeats a few stacks)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[Any, ...], tuple[str | None, str | None, str]] = {}

    def of(self, frames: object) -> tuple[str | None, str | None, str]:
        fr = frames if isinstance(frames, list) else []
        try:  # (C-speed: every frame has its three fields)
            key = tuple(map(_FRAME_KEY, fr))
        except (KeyError, TypeError):
            fr = [f for f in fr if isinstance(f, dict)]
            key = tuple((f.get("name"), f.get("filename"), f.get("line")) for f in fr)
        got = self.seen.get(key)
        if got is None:
            names = [str(f.get("name", "")) for f in fr]
            files = [str(f.get("filename", "")) for f in fr]
            framework, phase = classify(names, files)
            got = (framework, phase.value if phase else None, stack_text(fr))
            self.seen[key] = got
        return got


def _row(rank: int, e: dict[str, Any], stacks: _Stacks) -> tuple[object, ...]:
    pg = e.get("process_group") or ("", "")
    name = str(e.get("profiling_name") or "")
    backend, _, op = name.rpartition(":")
    dur = e.get("duration_ms")
    framework, phase, stack = stacks.of(e.get("frames"))
    return (
        rank, int(e.get("record_id", -1)), str(pg[0]), str(pg[1]) if len(pg) > 1 else "",
        int(e.get("collective_seq_id") or 0), int(e.get("p2p_seq_id") or 0),
        bool(e.get("is_p2p", False)), op or name, backend, str(e.get("state", "")),
        _ns(e.get("time_created_ns")), _ns(e.get("time_discovered_started_ns")),
        _ns(e.get("time_discovered_completed_ns")),
        float(dur) * 1e3 if isinstance(dur, (int, float)) else np.nan,
        str(e.get("input_sizes")), str(e.get("input_dtypes")),
        str(e.get("output_sizes")), str(e.get("output_dtypes")),
        _bytes(e.get("input_sizes"), e.get("input_dtypes")), framework, phase, stack,
        int(e.get("timeout_ms") or 0),
    )  # fmt: skip


_CATEGORIES = ("pg", "pg_desc", "op", "backend", "state", "framework", "phase", "stack",
               "input_sizes", "input_dtypes", "output_sizes", "output_dtypes")  # fmt: skip


def concat_entries(tables: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Several ranks' tables as one, their categories united."""
    if len(tables) == 1:
        return tables[0]
    from pandas.api.types import union_categoricals

    out = pd.concat([t.drop(columns=list(_CATEGORIES)) for t in tables], ignore_index=True)
    for col in _CATEGORIES:
        out[col] = union_categoricals([t[col] for t in tables])
    return out[ENTRY_COLUMNS]


def entries_table(dumps: Sequence[Dump]) -> pd.DataFrame:
    """Every entry of ``dumps`` (columns :data:`ENTRY_COLUMNS`), by rank then record."""
    stacks = _Stacks()
    rows = [_row(d.rank, e, stacks) for d in dumps for e in d.entries]
    df = pd.DataFrame.from_records(rows, columns=ENTRY_COLUMNS)
    for col in ("rank", "record_id", "seq", "p2p_seq", "issue_ns", "start_ns", "end_ns"):
        df[col] = df[col].astype(np.int64)
    for col in _CATEGORIES:
        df[col] = df[col].astype("category")
    return df.sort_values(["rank", "record_id"], kind="stable").reset_index(drop=True)
