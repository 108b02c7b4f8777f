"""What "where the GPU waits" (issue 30) costs: the CPU time per rank file of the analysis
with it, against the code before it, on the same files.

    git archive 8d84203 overlapscope | tar -x -C /tmp/base     # main before issue 30
    python benchmarks/wait_cost.py FILE... --base /tmp/base [--repeat 5] [--out JSON]

Per rank file, what a worker runs for it (``overlapscope.pipeline.tasks``: the parse task, the loader's parse and recognition of the file and the write of its events,
then the reduce task, the rank's tables), in a fresh process per run, the CPU time (user +
sys) of that work alone, imports excluded, the best of ``--repeat`` runs of each checkout
(on a shared machine the slower runs measure the neighbours), the two checkouts taking
turns. Issue 30's cost is the difference, as a share of the analysis before it; the
budget is 15 %. The cross-rank part (the collectives' split, the path's host links, the
clocks' bounds) runs once per run on the client, not per rank file: ``--runs DIR...``
times ``analyze()`` of whole runs the same way (loading excluded).
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
    s = resource.getrusage(resource.RUSAGE_SELF)
    return s.ru_utime + s.ru_stime
"""

PER_FILE = (
    CPU
    + """
import sys
from pathlib import Path
from overlapscope.cache import Cache, code_digest, entry_key
from overlapscope.pipeline.executor import LocalExecutor
from overlapscope.pipeline.plan import Inputs, plan
from overlapscope.pipeline.tasks import parse_to_cache, reduce_rank
path, root = Path(sys.argv[1]), sys.argv[2]
t0 = cpu_s()
parse_to_cache(str(path), 0, root, entry_key(path, 0), code_digest())
t1 = cpu_s()
inputs = Inputs((path,), allow_missing_ranks=True)
_, _, jobs = plan(inputs, LocalExecutor(), Cache(Path(root)))  # (the parse is cached)
t2 = cpu_s()
reduce_rank(jobs[0], root, code_digest())
t3 = cpu_s()
print(t1 - t0, t3 - t2)
"""
)

PER_RUN = (
    CPU
    + """
import sys
from overlapscope.analysis import analyze
from overlapscope.trace.run.loader import load_run
run = load_run(sys.argv[1], allow_missing_ranks=True)
t0 = cpu_s()
analyze(run)
print(cpu_s() - t0)
"""
)


def _run(code: str, checkout: Path, arg: Path, workdir: str) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(arg.resolve()), workdir],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=workdir,  # (``-c`` puts the working directory first on sys.path: not a checkout)
    )
    return (
        [float(x) for x in out.stdout.split()[-2:]]
        if code is PER_FILE
        else [float(out.stdout.split()[-1])]
    )


def _best(code: str, checkouts: dict[str, Path], arg: Path, repeat: int) -> dict[str, list[float]]:
    """Per checkout, the best of ``repeat`` runs of each figure, the checkouts taking turns."""
    runs: dict[str, list[list[float]]] = {k: [] for k in checkouts}
    for _ in range(repeat):
        for name, checkout in checkouts.items():
            with tempfile.TemporaryDirectory() as d:
                runs[name].append(_run(code, checkout, arg, d))
    return {k: [min(r[i] for r in v) for i in range(len(v[0]))] for k, v in runs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", type=Path, nargs="*")
    ap.add_argument("--base", type=Path, required=True, help="a checkout of the code before")
    ap.add_argument("--runs", type=Path, nargs="*", default=[], help="whole runs (analyze())")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    checkouts = {"before": args.base.resolve(), "after": REPO}
    rows = []
    for f in args.files:
        best = _best(PER_FILE, checkouts, f, args.repeat)
        before, after = sum(best["before"]), sum(best["after"])
        row = {"file": str(f), "bytes": f.stat().st_size}
        row |= {
            f"{k}_{part}_cpu_s": v
            for k, b in best.items()
            for part, v in zip(("parse", "reduce"), b, strict=True)
        }
        row |= {
            "before_cpu_s": before,
            "after_cpu_s": after,
            "added_pct": 100 * (after / before - 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    for r in args.runs:
        best = _best(PER_RUN, checkouts, r, args.repeat)
        before, after = best["before"][0], best["after"][0]
        row = {"run": str(r), "before_analyze_cpu_s": before, "after_analyze_cpu_s": after}
        row |= {"added_pct": 100 * (after / before - 1)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
