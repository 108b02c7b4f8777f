"""CPU time per rank file: the ``--dask`` task vs HTA 0.5.0 on the same single file.

    python benchmarks/cluster_rank_cpu.py FILE... [--repeat 3] [--profile]

Ours is the task a Dask worker runs per rank file (``overlapscope.cluster.tasks.parse_to_cache``:
the loader's per-file parse and recognition, then the Parquet cache write). HTA's is
``TraceAnalysis(trace_files={rank: FILE})`` + ``get_comm_comp_overlap(visualize=False)``.
Each runs in a fresh process; the CPU time (user + sys, children included) of the work alone
is measured, imports excluded; the best of ``--repeat`` runs is kept (on a shared machine the
slower runs measure the neighbours). ``--profile`` prints where our task's time goes
(cProfile, by own time). Results are printed as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CPU = """
import resource
def cpu_s():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
"""

OURS = (
    CPU
    + """
import sys
from overlapscope.cluster.cache import parser_digest
from overlapscope.cluster.tasks import parse_to_cache
import pyarrow, pandas
digest = parser_digest()
t0 = cpu_s()
parse_to_cache(sys.argv[1], 0, sys.argv[2], "bench", digest)
print(cpu_s() - t0)
"""
)

HTA = (
    CPU
    + """
import logging, sys, gzip, json
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
path = sys.argv[1]
t0 = cpu_s()
ta = TraceAnalysis(trace_files={0: path}, trace_dir=sys.argv[2], include_last_profiler_step=True)
ta.get_comm_comp_overlap(visualize=False)
print(cpu_s() - t0)
"""
)

PROFILE = """
import cProfile, pstats, sys
from overlapscope.cluster.cache import parser_digest
from overlapscope.cluster.tasks import parse_to_cache
import pyarrow, pandas
digest = parser_digest()
cProfile.run("parse_to_cache(sys.argv[1], 0, sys.argv[2], 'bench', digest)", sys.argv[2] + "/prof")
pstats.Stats(sys.argv[2] + "/prof").sort_stats("tottime").print_stats(15)
"""


def _run(code: str, path: Path, workdir: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(path.resolve()), workdir],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", type=Path, nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    for f in args.files:
        ours: list[float] = []
        hta: list[float] = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as d:
                ours.append(float(_run(OURS, f, d).split()[-1]))
            with tempfile.TemporaryDirectory() as d:
                # HTA reads every trace in trace_dir's tree it is given; give it only this one.
                hta.append(float(_run(HTA, f, str(f.resolve().parent)).split()[-1]))
        row = {"file": str(f), "bytes": f.stat().st_size, "ours_cpu_s": min(ours)}
        row |= {"hta_cpu_s": min(hta), "hta_over_ours": min(hta) / min(ours)}
        print(json.dumps(row), flush=True)
        if args.profile:
            with tempfile.TemporaryDirectory() as d:
                print(_run(PROFILE, f, d), flush=True)


if __name__ == "__main__":
    main()
