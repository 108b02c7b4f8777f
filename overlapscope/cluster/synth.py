"""Large runs made from real ones, for tests and benchmarks of ``--dask``.

:func:`rerank_copies` writes ``num_ranks`` trace files: byte copies of a real run's rank
files whose header is edited (``distributedInfo`` rank and world size, and
``baseTimeNanoseconds`` shifted by a few microseconds per rank, so no two ranks start at the
same instant, as on a real cluster). The events are left as written, in Kineto's layout,
so the copies parse exactly as the originals do.
"""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

from overlapscope.trace.naming.files import RUN_STAMP_KEY
from overlapscope.trace.run.loader import find_trace_files

SHIFT_NS_PER_RANK = 1500
_FIELDS = {
    "rank": re.compile(rb'("distributedInfo"\s*:\s*\{[^}]*?"rank"\s*:\s*)(\d+)'),
    "world_size": re.compile(rb'("distributedInfo"\s*:\s*\{[^}]*?"world_size"\s*:\s*)(\d+)'),
    "base": re.compile(rb'("baseTimeNanoseconds"\s*:\s*)(\d+)'),
}
_STAMP = re.compile(rb'"' + RUN_STAMP_KEY.encode() + rb'"\s*:\s*\{[^}]*\}\s*,\s*')


def _load(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _reranked(data: bytes, rank: int, world: int, path: Path) -> bytes:
    """``data`` with its header saying ``rank`` of ``world`` and its clock shifted (a run
    stamp left out: the copies are no rank of the run that stamped it)."""
    cut = data.find(b'"traceEvents"')
    header = _STAMP.sub(b"", data[:cut])
    values = {"rank": rank, "world_size": world}
    for field, pattern in _FIELDS.items():
        m = pattern.search(header)
        if m is None:
            raise ValueError(f"{path}: no {field} in the trace header; pick a run with it")
        new = values.get(field, int(m.group(2)) + rank * SHIFT_NS_PER_RANK)
        header = header[: m.start(2)] + str(new).encode() + header[m.end(2) :]
    return header + data[cut:]


def rerank_copies(run: Path, num_ranks: int, dest: Path, *, compress: bool = True) -> list[Path]:
    """Write ``num_ranks`` re-ranked copies of ``run``'s traces into ``dest``; returns them."""
    sources, _, _ = find_trace_files([run])
    bodies = [(p, _load(p)) for p in sources]
    dest.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    for rank in range(num_ranks):
        src, data = bodies[rank % len(bodies)]
        body = _reranked(data, rank, num_ranks, src)
        suffix = ".json.gz" if compress else ".json"
        path = dest / f"rank-{rank}.pt.trace{suffix}"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(gzip.compress(body, compresslevel=1) if compress else body)
        os.replace(tmp, path)
        out.append(path)
    return out
