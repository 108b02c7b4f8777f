"""CPU time of each part of the ``--dask`` reduce task on one rank file, warm.

    python benchmarks/reduce_parts.py FILE [--repeat 21]

In one process: the file is parsed into a temporary cache (``tasks.parse_to_cache``) and the
client's plan made, then each part of ``tasks.reduce_rank`` is run ``--repeat`` times in
turn and its best CPU time (user + sys of the process) printed, in ms: reading the events
back (``rank_events``), each per-rank table function on the counted rows, ``rank_tables`` as
a whole, and writing the two big tables (``write_table``). The parts run once untimed
first: the steady state of a worker, without a fresh process's first-use costs (see
``cluster_rank_cpu.py`` for those). Runs on any checkout whose ``overlapscope`` has these
functions (``PYTHONPATH=CHECKOUT``), to compare two. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _best_ms(fn: Callable[[], Any], repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = _cpu_s()
        fn()
        best = min(best, _cpu_s() - t)
    return round(best * 1000, 2)


def _parts(path: Path, root: Path) -> dict[str, Callable[[], Any]]:
    from overlapscope.analysis.registry import rank_tables
    from overlapscope.analysis.timeline import levers, metrics, units
    from overlapscope.cache import Cache, code_digest, entry_key
    from overlapscope.pipeline import memory, tasks
    from overlapscope.pipeline.executor import LocalExecutor
    from overlapscope.pipeline.plan import Inputs, plan
    from overlapscope.table_files import write_table
    from overlapscope.trace.run.loader import RunTraces

    tasks.parse_to_cache(str(path), 0, str(root), entry_key(path, 0), code_digest())
    cache = Cache(root)
    _, _, jobs = plan(Inputs((path,), allow_missing_ranks=True), LocalExecutor(), cache)
    job = jobs[0]
    events = tasks.rank_events(job, cache)
    run = RunTraces(events, (job.info,), job.world_size, job.manifest, job.completed_run, (), ())
    counted = metrics.counted_mask(run)
    rows = dataclasses.replace(run, events=run.events[counted].reset_index(drop=True))
    every = counted[counted].reset_index(drop=True)
    sets = metrics.lane_sets(rows, every)
    steps = metrics.step_table(rows, every, sets)
    ranks = metrics.rank_table(rows, every, steps, sets)
    exposure = metrics.comm_exposure(rows, every)
    tables = rank_tables(run)
    memory.released().__enter__()  # the task's allocator settings

    def write() -> None:
        for name in (*tasks.EVENTS_FIGURES, *tasks.ON_DEMAND_FIGURES):
            write_table(root / "out" / f"{name}.arrow", tables[name])

    return {
        "rank_events": lambda: tasks.rank_events(job, cache),
        "lane_sets": lambda: metrics.lane_sets(rows, every),
        "step_table": lambda: metrics.step_table(rows, every, sets),
        "rank_table": lambda: metrics.rank_table(rows, every, steps, sets),
        "comm_exposure": lambda: metrics.comm_exposure(rows, every),
        "unit_table": lambda: units.unit_table(rows, every, exposure, ranks),
        "compute_by_unit": lambda: units.compute_by_unit(rows, every),
        "lever_table": lambda: levers.lever_table(rows, every),
        "exposed_intervals": lambda: metrics.exposed_intervals(rows, every, steps, sets),
        "timeline_table": lambda: metrics.timeline_table(rows, every, exposure),
        "rank_tables": lambda: rank_tables(run),
        "write_tables": write,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--repeat", type=int, default=21)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        parts = _parts(args.file.resolve(), Path(d))
        row = {name: _best_ms(fn, args.repeat) for name, fn in parts.items()}
    print(json.dumps({"file": str(args.file), "cpu_ms": row}), flush=True)


if __name__ == "__main__":
    main()
