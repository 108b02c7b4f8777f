"""Throughput and memory of ``overlapscope analyze --dask`` on re-ranked copies of a real run.

    python benchmarks/cluster_scale.py [--run traces/none] [--ranks 16 64 256] [--workers 1 2]

For each rank count, a set is made from the run's traces (``overlapscope.cluster.synth``:
new ``distributedInfo`` rank and world size, clocks shifted); for each worker count, a real
``dask scheduler`` and that many ``dask worker`` processes (one thread each) start on
loopback and ``overlapscope analyze SET --dask ADDRESS --cache FRESH --json /dev/null`` runs
as its own process, then once more from the cache (the whole result is cached), then once
more with the result entry removed (the cross-rank work redone from the per-rank summaries). Resident sets are sampled from /proc every
20 ms: the CLI process (client) and each worker (its peak, and its peak above its idle
size once the parser and pyarrow are imported).
CPU time is the CLI's and the workers' user + sys. Results are printed as JSON lines.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from overlapscope.cluster.synth import rerank_copies  # noqa: E402
from tests.cluster.conftest import start_dask  # noqa: E402


class PeakRss:
    """Samples the resident set of some processes every 20 ms; ``peaks`` per pid."""

    def __init__(self, pids: list[int]) -> None:
        self.procs = [psutil.Process(p) for p in pids]
        self.peaks = {p.pid: 0 for p in self.procs}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in self.procs:
                with contextlib.suppress(psutil.Error):
                    self.peaks[p.pid] = max(self.peaks[p.pid], p.memory_info().rss)
            time.sleep(0.02)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def _cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def analyze_once(address: str, run: Path, cache: Path, workers: list[int]) -> dict[str, float]:
    cmd = [sys.executable, "-m", "overlapscope", "analyze", str(run), "--dask", address]
    cmd += ["--cache", str(cache), "--json", "/dev/null"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    idle = {p: psutil.Process(p).memory_info().rss for p in workers}
    cpu0 = {p: _cpu_s(p) for p in workers}
    t0 = time.perf_counter()
    cli = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with PeakRss([cli.pid, *workers]) as rss:
        # The client's own CPU time is in wait4's rusage (not its ru_maxrss: Linux carries
        # the forking parent's peak across exec, so only the sampled peak is the client's).
        _, status, usage = os.wait4(cli.pid, 0)
    wall = time.perf_counter() - t0
    assert os.waitstatus_to_exitcode(status) == 0, cli.stderr.read() if cli.stderr else ""
    return {
        "wall_s": wall,
        "client_cpu_s": usage.ru_utime + usage.ru_stime,
        "client_peak_rss_mb": rss.peaks[cli.pid] / 1e6,
        "worker_cpu_s": sum(_cpu_s(p) - cpu0[p] for p in workers),
        "worker_peak_rss_mb": max(rss.peaks[p] for p in workers) / 1e6,
        "worker_peak_above_idle_mb": max(rss.peaks[p] - idle[p] for p in workers) / 1e6,
    }


def measure(run: Path, num_workers: int, tmp: Path) -> dict[str, object]:
    files = sorted(run.glob("*.json.gz"))
    raw_bytes = [len(gzip.decompress(f.read_bytes())) for f in files]
    procs = start_dask(tmp, num_workers)
    try:
        from distributed import Client

        # Idle means ready to work: the parser and Parquet writer imported on every worker.
        with Client(procs.address) as client:
            client.run(lambda: __import__("overlapscope.pipeline.run") and __import__("pyarrow"))
        workers = [p.pid for p in procs.workers]
        first = analyze_once(procs.address, run, tmp / "cache", workers)
        cached = analyze_once(procs.address, run, tmp / "cache", workers)
        # The same without the whole-result entry: the cross-rank work from the summaries.
        for entry in (tmp / "cache").glob("result-*.pkl"):
            entry.unlink()
        summaries = analyze_once(procs.address, run, tmp / "cache", workers)
    finally:
        procs.close()
    per_worker = first["wall_s"] * num_workers
    return {
        "num_ranks": len(files),
        "num_workers": num_workers,
        "uncompressed_gb": sum(raw_bytes) / 1e9,
        "largest_uncompressed_mb": max(raw_bytes) / 1e6,
        "first": first,
        "from_cache": cached,
        "from_summaries": summaries,
        "files_per_s_per_worker": len(files) / per_worker,
        "gb_per_s_per_worker": sum(raw_bytes) / 1e9 / per_worker,
        "cache_over_first": cached["wall_s"] / first["wall_s"],
        # CPU is steadier than wall time on a loaded machine: all the CPU of the re-run
        # (client and workers) over all the CPU of the first.
        "cache_over_first_cpu": (cached["client_cpu_s"] + cached["worker_cpu_s"])
        / (first["client_cpu_s"] + first["worker_cpu_s"]),
        "summaries_over_first_cpu": (summaries["client_cpu_s"] + summaries["worker_cpu_s"])
        / (first["client_cpu_s"] + first["worker_cpu_s"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=REPO / "traces" / "none")
    ap.add_argument("--ranks", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for n in args.ranks:
            run = Path(d) / f"run{n}"
            rerank_copies(args.run, n, run)
            for w in args.workers:
                tmp = Path(tempfile.mkdtemp(dir=d))
                print(json.dumps(measure(run, w, tmp)), flush=True)


if __name__ == "__main__":
    main()
