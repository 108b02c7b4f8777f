"""CPU time per rank file: the ``--dask`` task vs HTA 0.5.0 on the same single file.

    python benchmarks/cluster_rank_cpu.py FILE... [--repeat 3] [--profile] [--warm]

Ours is the two tasks a Dask worker runs per rank file for ``analyze --dask``
(``overlapscope.pipeline.tasks``: ``parse_to_cache``, the loader's per-file parse and
recognition and the events' write, then ``reduce_rank``, the rank's tables;
``reduce_cpu_s`` is the best run's total minus the best parse; ``task_peak_above_idle_mb``:
the peak resident set of both tasks above the process once imported, in a plain process,
not a Dask worker). ``timeline_cpu_s`` (not in ours): the task that ``--csv`` and the
dashboard add per rank, its timeline rows (``timeline_rank``), measured after the others. HTA's is
``TraceAnalysis(trace_files={rank: FILE})`` + ``get_comm_comp_overlap(visualize=False)``.
Each runs in a fresh process; the CPU time (user + sys, children included) of the work alone
is measured, imports excluded; the best of ``--repeat`` runs is kept (on a shared machine the
slower runs measure the neighbours). ``--profile`` prints where our task's time goes
(cProfile, by own time). ``--warm``: each process first does the same work once, untimed
(ours into another cache directory, HTA on its own object), and the second time is measured:
the steady state of a worker that has parsed a rank before, as in a job of many alike ranks,
without the first-use costs (code paths, lazily imported modules, configs) that a fresh
process pays once, for both tools. Results are printed as JSON lines.
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

# Parse (the parse task), the client's plan for one rank (not timed: it reads the few-KB
# meta), then the reduce task.
SETUP = """
import sys
from pathlib import Path
from overlapscope.cache import Cache, code_digest, entry_key
from overlapscope.pipeline.executor import LocalExecutor
from overlapscope.pipeline.plan import Inputs, plan
from overlapscope.pipeline.tasks import on_demand_rank, parse_to_cache, reduce_rank
import pyarrow, pandas
path, root = Path(sys.argv[1]), sys.argv[2]
def parse():
    parse_to_cache(str(path), 0, root, entry_key(path, 0), code_digest())
def reduce():
    _, _, jobs = plan(Inputs((path,), allow_missing_ranks=True), LocalExecutor(), Cache(Path(root)))  # (the parse is cached)
    return lambda: reduce_rank(jobs[0], root, code_digest()), jobs[0]
"""

OURS = (
    CPU
    + SETUP
    + """
def status_mb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
if sys.argv[3] == "warm":
    import tempfile
    with tempfile.TemporaryDirectory() as first:
        root, path_root = first, root
        parse()
        reduce()[0]()
        root = path_root
idle = status_mb("VmRSS")
t0 = cpu_s()
parse()
t1 = cpu_s()
task, job = reduce()
t2 = cpu_s()
task()
t3 = cpu_s()
# the peak resident set of both tasks above the process once imported (MB)
peak = status_mb("VmHWM") - idle
on_demand_rank(job, root, code_digest())
print(peak, t1 - t0, t3 - t2, cpu_s() - t3)
"""
)

HTA = (
    CPU
    + """
import logging, sys, gzip, json
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
path = sys.argv[1]
if sys.argv[3] == "warm":
    TraceAnalysis(trace_files={0: path}, trace_dir=sys.argv[2], include_last_profiler_step=True
        ).get_comm_comp_overlap(visualize=False)
t0 = cpu_s()
ta = TraceAnalysis(trace_files={0: path}, trace_dir=sys.argv[2], include_last_profiler_step=True)
ta.get_comm_comp_overlap(visualize=False)
print(cpu_s() - t0)
"""
)

PROFILE = (
    SETUP
    + """
import cProfile, pstats
cProfile.run("parse()", root + "/prof")
pstats.Stats(root + "/prof").sort_stats("tottime").print_stats(12)
task, _ = reduce()
cProfile.run("task()", root + "/prof2")
pstats.Stats(root + "/prof2").sort_stats("tottime").print_stats(12)
"""
)


def _run(code: str, path: Path, workdir: str, mode: str = "cold") -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(path.resolve()), workdir, mode],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,  # (``-c`` puts the working directory first on sys.path)
    )
    return out.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", type=Path, nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--warm", action="store_true", help="measure a second run per process")
    args = ap.parse_args()
    mode = "warm" if args.warm else "cold"
    for f in args.files:
        ours: list[float] = []
        parse: list[float] = []
        peak: list[float] = []
        timeline: list[float] = []
        hta: list[float] = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as d:
                m, p, r, t = map(float, _run(OURS, f, d, mode).split()[-4:])
                peak.append(m)
                timeline.append(t)
                parse.append(p)
                ours.append(p + r)
            with tempfile.TemporaryDirectory() as d:
                # HTA reads every trace in trace_dir's tree it is given; give it only this one.
                hta.append(float(_run(HTA, f, str(f.resolve().parent), mode).split()[-1]))
        row = {"file": str(f), "mode": mode, "bytes": f.stat().st_size, "ours_cpu_s": min(ours)}
        row |= {"parse_cpu_s": min(parse), "reduce_cpu_s": min(ours) - min(parse)}
        row |= {"task_peak_above_idle_mb": min(peak), "timeline_cpu_s": min(timeline)}
        row |= {"hta_cpu_s": min(hta), "hta_over_ours": min(hta) / min(ours)}
        print(json.dumps(row), flush=True)
        if args.profile:
            with tempfile.TemporaryDirectory() as d:
                print(_run(PROFILE, f, d), flush=True)


if __name__ == "__main__":
    main()
