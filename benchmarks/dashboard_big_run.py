"""What the dashboard process costs on a run of many ranks, with and without ``--dask``.

    python benchmarks/dashboard_big_run.py RUN --cache DIR [--dask local]

Each mode in a fresh process (``--one MODE``), as ``overlapscope dashboard`` would do it:

* ``dask``: ``RunRegistry(target=Target(ADDRESS, DIR))``: open the run (its summaries, from
  the cache when ``analyze --dask`` or an earlier run made them: run it once first), then the
  Timeline view of each profiled step with the default ranks (the step's critical path, at
  most 8), read from the cache;
* ``local``: the plain dashboard: ``load_run`` + ``analyze`` of every rank, then the Timeline
  view of each step (every rank drawn).

Prints a Markdown table: seconds to open the run, seconds per Timeline view (mean over the
steps), ranks drawn per view, and the process' peak RSS (MB, ``ru_maxrss``).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def one(mode: str, run: Path, cache: Path, address: str) -> dict[str, float]:
    """Open ``run`` in a registry of ``mode`` and draw each step's timeline."""
    from dashboards import views
    from dashboards.data import RunRegistry, discover_runs
    from overlapscope.pipeline.run import Target

    runs = discover_runs([run])
    target = Target(address, cache) if mode == "dask" else None
    registry = RunRegistry(runs, use_disk_cache=False, target=target)
    key = runs[0].key
    t0 = time.perf_counter()
    loaded = registry.load(key)
    opened = time.perf_counter() - t0
    steps = sorted(int(s) for s in loaded.analysis.steps["step"].unique())
    t0 = time.perf_counter()
    drawn = 0
    for step in steps:
        fig = views.timeline_view(registry, key, None, step)[-1].figure
        drawn += len({str(y).split(" · ")[0] for t in fig.data if t.type == "bar" for y in t.y})
    per_view = (time.perf_counter() - t0) / len(steps)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "ranks": float(len(loaded.analysis.ranks)),
        "open_s": opened,
        "view_s": per_view,
        "drawn": drawn / len(steps),
        "peak_mb": peak_mb,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", type=Path)
    p.add_argument("--cache", type=Path, required=True)
    p.add_argument("--dask", default="local")
    p.add_argument("--one", choices=["dask", "local"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.run, args.cache, args.dask)))
        return
    print("| mode | ranks | open (s) | timeline view (s) | ranks drawn per view | peak RSS (MB) |")
    print("|---|---|---|---|---|---|")
    for mode in ("dask", "local"):
        cmd = [sys.executable, __file__, str(args.run), "--cache", str(args.cache)]
        out = subprocess.run(
            [*cmd, "--dask", args.dask, "--one", mode], capture_output=True, text=True, check=True
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"| {mode} | {r['ranks']:.0f} | {r['open_s']:.2f} | {r['view_s']:.2f} "
            f"| {r['drawn']:.0f} | {r['peak_mb']:.0f} |"
        )


if __name__ == "__main__":
    main()
