"""File names of a run directory (the part of the trace contract that is not range names).

A run directory holds ``rank-<K>.pt.trace.json.gz`` per rank, ``run.json`` (the manifest,
written last, once every rank is done: ``overlapscope/manifest.py``), ``config.json`` (the
recipe) and ``logs/``.
"""


def trace_name(rank: int) -> str:
    return f"rank-{rank}.pt.trace.json.gz"
