"""Compute right after an idle wait: how much longer it takes on this machine.

    python benchmarks/idle_compute.py [--procs 2] [--repeats 25] [--out docs/bench/idle-compute.json]

Why: in the what-if validation a unit's forward compute, which overlaps no transfer, runs
6-20 % slower at 0.25 Gbit/s than at 1 Gbit/s (docs/BENCHMARKS.md). Before each forward
compute the rank's thread waits for the unit's all-gather: ~15 ms at 1 Gbit/s, ~50 ms at
0.25. This measures, outside the engine, whether a fixed piece of compute (three 256x1024 by
1024x1024 matmuls, one thread, ~9 ms) takes longer after sleeping longer. ``--procs`` copies run
at once (the engine's two ranks share the two cores); the sleeps are shuffled in every
repeat so that drift of the machine spreads over all of them. Per sleep: the median compute
time over the repeats and processes, and its excess over no sleep (ms).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import sys
import time
from pathlib import Path

SLEEPS_MS = (0, 2, 5, 10, 15, 25, 50, 100)


def _one(repeats: int, seed: int) -> dict[int, list[float]]:
    import torch

    torch.set_num_threads(1)
    a, w = torch.randn(256, 1024), torch.randn(1024, 1024)

    def work_ms() -> float:
        t = time.perf_counter()
        for _ in range(3):
            (a @ w).relu_()
        return (time.perf_counter() - t) * 1e3

    for _ in range(20):  # warm-up
        work_ms()
    rng = random.Random(seed)
    out: dict[int, list[float]] = {s: [] for s in SLEEPS_MS}
    order = list(SLEEPS_MS)
    for _ in range(repeats):
        rng.shuffle(order)
        for s in order:
            if s:
                time.sleep(s / 1e3)
            out[s].append(work_ms())
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=25)
    ap.add_argument("--out", type=Path, default=Path("docs/bench/idle-compute.json"))
    args = ap.parse_args(argv)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(args.procs) as pool:
        runs = pool.starmap(_one, [(args.repeats, seed) for seed in range(args.procs)])
    merged = {s: [x for r in runs for x in r[s]] for s in SLEEPS_MS}
    base = statistics.median(merged[0])
    rows = [
        {
            "sleep_ms": s,
            "compute_ms_median": statistics.median(v),
            "excess_ms": statistics.median(v) - base,
            "n": len(v),
        }
        for s, v in merged.items()
    ]
    for r in rows:
        print(
            f"after {r['sleep_ms']:3d} ms idle: {r['compute_ms_median']:.3f} ms "
            f"({r['excess_ms']:+.3f} ms, n={r['n']})"
        )
    doc = {"command": "python benchmarks/idle_compute.py " + " ".join(argv), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
