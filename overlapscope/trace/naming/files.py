"""File names of a run directory (the part of the trace contract that is not range names).

A run directory holds ``rank-<K>.pt.trace.json.gz`` per rank, ``run.json`` (the manifest,
written last, once every rank is done: ``overlapscope/manifest.py``), ``config.json`` (the
recipe) and ``logs/``.
"""


def trace_name(rank: int) -> str:
    return f"rank-{rank}.pt.trace.json.gz"


# The top-level key of the run stamp ``overlapscope run`` writes into each trace (the run's id
# and the rank: ``{"run_id": "...", "rank": K}``); ``run.json`` lists each trace's stamp.
RUN_STAMP_KEY = "overlapscopeRun"
# How the launcher hands each rank the run's id (a fresh uuid4 hex per run).
RUN_ID_ENV = "OVERLAPSCOPE_RUN_ID"
