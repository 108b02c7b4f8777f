"""What a ``--dask`` task leaves resident, and the critical path's cost in the number of ranks.

    python benchmarks/cluster_task_memory.py RUN_DIR [--path-ranks 64 128 256]

1. In a fresh process, ``parse_to_cache`` on each rank file of RUN_DIR in turn; the resident
   set (VmRSS) after each and the peak (VmHWM), with the tasks' ``released()`` as shipped and
   with it made a no-op.
2. The critical path (``analysis.critical_path``) of one step of ``traces/none`` re-ranked to
   64 ranks, its rows repeated as ranks 64-127, ... to reach each ``--path-ranks``: CPU time
   and the tracemalloc peak (what one ``step_path`` task computes).

Results are printed as JSON lines.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

TASKS = """
import contextlib, json, sys, tempfile
from pathlib import Path
import pandas, pyarrow, pyarrow.parquet
import overlapscope.pipeline.run
from overlapscope.pipeline import memory, tasks
from overlapscope.cache import code_digest, entry_key
def mb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
if sys.argv[2] == "kept":
    tasks.released = memory.released = contextlib.nullcontext
out = {"release": sys.argv[2], "idle_mb": mb("VmRSS"), "after": []}
with tempfile.TemporaryDirectory() as d:
    for f in sorted(Path(sys.argv[1]).glob("rank-*.json*")):
        tasks.parse_to_cache(str(f), 0, d, entry_key(f, 0), code_digest())
        out["after"].append({"file": f.name, "rss_mb": mb("VmRSS"), "peak_mb": mb("VmHWM")})
print(json.dumps(out))
"""

PATH = """
import json, sys, time, tracemalloc
from pathlib import Path
import pandas as pd
from overlapscope.analysis.critical_path.path import critical_path
from overlapscope.cluster.synth import rerank_copies
from overlapscope.trace.run.loader import load_run
run = rerank_copies(Path(sys.argv[1]) / "traces" / "none", 64, Path(sys.argv[2]) / "run")
ev = load_run(Path(sys.argv[2]) / "run", progress=False).events
rows = ev[ev["step"] == int(ev.loc[ev["step"] >= 0, "step"].min())]
for n in map(int, sys.argv[3:]):
    k = n // 64
    big = pd.concat([rows.assign(rank=rows["rank"] + 64 * i) for i in range(k)], ignore_index=True)
    tracemalloc.start()
    t0 = time.process_time()
    critical_path(big)
    cpu = time.process_time() - t0
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    print(json.dumps({"ranks": 64 * k, "cpu_s": cpu, "tracemalloc_peak_mb": peak}))
"""


def _run(code: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-c", code, *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--path-ranks", type=int, nargs="+", default=[64, 128, 256])
    args = ap.parse_args()
    for mode in ("released", "kept"):
        print(_run(TASKS, str(args.run), mode), end="", flush=True)
    with tempfile.TemporaryDirectory() as d:
        print(_run(PATH, str(REPO), d, *map(str, args.path_ranks)), end="", flush=True)


if __name__ == "__main__":
    main()
