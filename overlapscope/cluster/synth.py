"""Large runs made from real ones, for tests and benchmarks of ``--dask``.

:func:`rerank_copies` writes ``num_ranks`` trace files: copies of a real run's rank files,
each given a new ``distributedInfo`` rank and world size and a clock shifted by a few
microseconds per rank (so no two ranks start at the same instant, as on a real cluster).
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

import orjson

from overlapscope.trace.loader import find_trace_files

SHIFT_US_PER_RANK = 1.5


def _load(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    doc: dict[str, Any] = orjson.loads(data)
    return doc


def _shifted(doc: dict[str, Any], rank: int, world: int, shift_us: float) -> bytes:
    events = [
        {**e, "ts": e["ts"] + shift_us} if isinstance(e.get("ts"), (int, float)) else e
        for e in doc.get("traceEvents", [])
    ]
    info = {**doc.get("distributedInfo", {}), "rank": rank, "world_size": world}
    return orjson.dumps({**doc, "distributedInfo": info, "traceEvents": events})


def rerank_copies(run: Path, num_ranks: int, dest: Path, *, compress: bool = True) -> list[Path]:
    """Write ``num_ranks`` re-ranked copies of ``run``'s traces into ``dest``; returns them."""
    sources, _ = find_trace_files([run])
    docs = [_load(p) for p in sources]
    dest.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    for rank in range(num_ranks):
        body = _shifted(docs[rank % len(docs)], rank, num_ranks, rank * SHIFT_US_PER_RANK)
        suffix = ".json.gz" if compress else ".json"
        path = dest / f"rank-{rank}.pt.trace{suffix}"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(gzip.compress(body, compresslevel=1) if compress else body)
        os.replace(tmp, path)
        out.append(path)
    return out
