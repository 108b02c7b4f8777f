"""Critical path at many ranks: CPU time and peak RSS per step of ``critical_path``.

    python benchmarks/clock_path_scale.py [--ranks 16 64 256] [--repeat 3]
        [--run traces/backward_pre] [--dump DIR] [--out FILE.json]

Each rank count is a set of re-ranked copies of ``--run``'s rank files
(:func:`overlapscope.cluster.synth.rerank_copies`, each copy's clock shifted a little, as in
``benchmarks/cluster_scale.py``), loaded once. ``critical_path`` of its event table is then
timed ``--repeat`` times: best CPU time of this process (``time.process_time``: the machine
may be loaded) and the largest (over the repeats) rise of this process's resident set above its level before
the call (sampled every 2 ms; near 0 when the call reuses memory the load freed), both
divided by the number of steps; then, in one more call under ``tracemalloc``, the peak of the
memory it allocated (numpy's arrays included) per step. ``--dump DIR`` writes the
result (links and steps, every column) as ``DIR/path-<ranks>.pkl``, to compare two versions
of the code (run this script with each on ``PYTHONPATH``). Printed as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import pickle
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import psutil

from overlapscope.analysis.critical_path.path import critical_path
from overlapscope.cluster.synth import rerank_copies
from overlapscope.trace.run.loader import load_run


class PeakRss:
    """The largest resident set of this process while open, sampled every 2 ms."""

    def __init__(self) -> None:
        self.proc = psutil.Process()
        self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def measure(run: Path, repeat: int, dump: Path | None, num_ranks: int) -> dict[str, object]:
    events = load_run(run).events
    cpu_s, rise_bytes = [], []
    for _ in range(repeat):
        before = psutil.Process().memory_info().rss
        t0 = time.process_time()
        with PeakRss() as rss:
            path = critical_path(events)
        cpu_s.append(time.process_time() - t0)
        rise_bytes.append(rss.peak - before)
    tracemalloc.start()
    critical_path(events)
    _, peak_alloc = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    num_steps = len(path.steps)
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        with open(dump / f"path-{num_ranks}.pkl", "wb") as f:
            pickle.dump((path.links, path.steps), f)
    return {
        "ranks": num_ranks,
        "steps": num_steps,
        "links": len(path.links),
        "cpu_s_per_step": min(cpu_s) / num_steps,
        "peak_rss_rise_mb_per_step": max(rise_bytes) / num_steps / 2**20,
        "peak_alloc_mb_per_step": peak_alloc / num_steps / 2**20,
        "repeat": repeat,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--run", type=Path, default=Path("traces/backward_pre"))
    parser.add_argument("--dump", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for n in args.ranks:
            run = Path(d) / f"r{n}"
            rerank_copies(args.run, n, run)
            rows.append(measure(run, args.repeat, args.dump, n))
            print(json.dumps(rows[-1]), flush=True)
    if args.out is not None:
        tmp = args.out.with_name(f".{args.out.name}.tmp")
        tmp.write_text(json.dumps(rows, indent=1) + "\n")
        tmp.replace(args.out)


if __name__ == "__main__":
    main()
