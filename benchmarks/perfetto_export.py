"""What ``analyze --perfetto`` costs: file size per rank and step, time, and memory against the
number of ranks.

    python benchmarks/perfetto_export.py [--source traces/gpu-engine-gloo2-backward_pre]
        [--ranks 8 16 32 64] [--dask] [--out docs/bench/perfetto.json]

For each rank count, SOURCE re-ranked to that many ranks (``cluster.synth.rerank_copies``:
byte copies of its rank files), in a fresh process: load and analyse it, then write the
export while a thread samples the resident set (VmRSS) every 2 ms. Reported: the resident
set before the export (the loaded run and its analysis) and the export's peak above it, the
export's wall and CPU seconds, the file's size and its size per rank and step. ``--dask``:
the same with ``--dask local`` (a LocalCluster of 2 workers); the client's resident set is
measured (the parts are written by the workers), the analysis read back from the cache.
Then each shipped run and shared external trace, exported as it is: size per rank and step.
Results are printed as JSON lines and written to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

ONE = """
import json, sys, threading, time
from pathlib import Path
from overlapscope.analysis.api import analyze
from overlapscope.cluster.synth import rerank_copies
from overlapscope.trace.run.loader import load_run
def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
source, n, tmp, dask = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "1"
run_dir = tmp / "run"
if n:
    rerank_copies(source, n, run_dir)
else:
    run_dir = source
out = tmp / "export.json.gz"
if dask:
    from overlapscope.pipeline.perfetto import export_stored
    from overlapscope.pipeline.plan import Inputs
    from overlapscope.pipeline.run import Target, analyse, opened
    target = Target("local", tmp / "cache")
    cache = opened(target).__enter__()
    done = analyse(Inputs((run_dir,)), target, cache)
    analysis = done.analysis
    export = lambda: export_stored(out, done, target, cache, (None, None))
else:
    run = load_run(run_dir, progress=False)
    analysis = analyze(run)
    from overlapscope.perfetto.export import write_perfetto
    export = lambda: write_perfetto(out, analysis, run)
before = rss_mb()
peak, stop = [before], threading.Event()
def sample():
    while not stop.is_set():
        peak[0] = max(peak[0], rss_mb())
        time.sleep(0.002)
t = threading.Thread(target=sample); t.start()
wall, cpu = time.perf_counter(), time.process_time()
export()
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
stop.set(); t.join()
steps = len(set(analysis.steps["step"]))
ranks = len(analysis.summary.ranks)
size = out.stat().st_size
print(json.dumps({"source": str(sys.argv[1]), "ranks": ranks, "steps": steps, "dask": dask,
    "rss_before_mb": round(before, 1), "export_peak_above_mb": round(peak[0] - before, 1),
    "export_wall_s": round(wall, 2), "export_cpu_s": round(cpu, 2), "file_bytes": size,
    "bytes_per_rank_step": round(size / ranks / max(steps, 1))}))
"""


def measure(source: Path, num_ranks: int, dask: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [sys.executable, "-c", ONE, str(source), str(num_ranks), tmp, "1" if dask else "0"],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        )
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--source", type=Path, default=REPO / "traces" / "gpu-engine-gloo2-backward_pre")
    p.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 32, 64])
    p.add_argument("--dask", action="store_true", help="also with --dask local")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "bench" / "perfetto.json")
    args = p.parse_args()
    results = []
    for dask in (False, True) if args.dask else (False,):
        for n in args.ranks:
            results.append(measure(args.source, n, dask))
            print(json.dumps(results[-1]), flush=True)
    shipped = sorted(d for d in (REPO / "traces").iterdir() if list(d.glob("rank-*.json.gz")))
    external = sorted((REPO.parent / "shared" / "external-traces").glob("*.json.gz"))
    for source in [*shipped, *external]:
        results.append(measure(source, 0, False))
        print(json.dumps(results[-1]), flush=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
