"""A Dask worker's resident set over the per-rank tasks of a run, without Dask.

    PYTHONPATH=. python benchmarks/cluster_thread_memory.py RUN_DIR [--on main|thread]

In this process: ``parse_to_cache`` on each rank file of RUN_DIR, then the client's plan (not
measured), then ``reduce_rank`` of each rank, every task run on one long-lived worker thread
as a ``dask worker --nthreads 1`` runs them (``--on thread``, the default), or on the main
thread (``--on main``). Per task: the resident set above the idle process (every module
imported) when it starts, its peak (VmHWM, reset before each task) and when it ends, in MB.
The overlapscope measured is the one on ``PYTHONPATH`` (another checkout's, to compare).
Printed as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas  # noqa: F401  (imported before the idle size is taken, as in a worker)
import pyarrow  # noqa: F401

from overlapscope.cache import Cache, code_digest, entry_key
from overlapscope.pipeline.executor import LocalExecutor
from overlapscope.pipeline.plan import Inputs, plan
from overlapscope.pipeline.tasks import parse_to_cache, reduce_rank


def _mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status (Linux only)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--on", choices=("main", "thread"), default="thread")
    args = ap.parse_args()
    pool = ThreadPoolExecutor(1) if args.on == "thread" else None
    files = sorted(args.run.glob("rank-*.json*"))
    idle = _mb("VmRSS")

    def measured(task: str, name: str, fn: Callable[..., Any], *fn_args: Any) -> None:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident set
        start = _mb("VmRSS") - idle
        (pool.submit(fn, *fn_args).result() if pool else fn(*fn_args))
        row = {"on": args.on, "task": task, "rank_file": name, "start_mb": round(start, 1)}
        row |= {"peak_mb": round(_mb("VmHWM") - idle, 1), "end_mb": round(_mb("VmRSS") - idle, 1)}
        print(json.dumps(row), flush=True)

    with tempfile.TemporaryDirectory() as root:
        for f in files:
            measured(
                "parse", f.name, parse_to_cache, str(f), 0, root, entry_key(f, 0), code_digest()
            )
        inputs = Inputs(tuple(files), allow_missing_ranks=True)  # (the parses are cached)
        _, _, jobs = plan(inputs, LocalExecutor(), Cache(Path(root)))
        for job in jobs:
            measured("reduce", job.info.path.name, reduce_rank, job, root, code_digest())


if __name__ == "__main__":
    main()
