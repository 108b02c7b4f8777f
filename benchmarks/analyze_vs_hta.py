"""Time and peak memory of ``overlapscope analyze`` vs HTA on the same trace files.

    python benchmarks/analyze_vs_hta.py RUN_DIR            # an existing run directory
    python benchmarks/analyze_vs_hta.py RUN_DIR --generate # make it first with the engine

Each side runs in its own fresh Python process, ``--repeat`` times alternately (the best run
of each side is compared: on a shared machine the slowest runs measure the neighbours); peak
memory is the largest summed resident
set of that process and its children (our loader's worker processes), sampled from /proc
every 20 ms. CPU time (user + sys, children included) is reported too: on a shared
machine it is the steadier measure. HTA's side is ``TraceAnalysis(trace_files={rank: path}, trace_dir=...)`` plus
``get_comm_comp_overlap(visualize=False)``; ours is the ``overlapscope analyze --no-cache``
command (every rank parsed and reduced, the JSON report; nothing read back from a cache). Results are printed as JSON.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from overlapscope.manifest import read_manifest

# A CPU run whose traces add up to a few hundred MB uncompressed (about 200 MB per rank).
GENERATE = [
    "--nproc", "2", "--policy", "backward_pre", "--model", "gpt", "--layers", "16",
    "--dim", "64", "--heads", "2", "--seq-len", "16", "--vocab", "256",
    "--global-batch", "4", "--steps", "37", "--profile-wait", "1", "--profile-warmup", "1",
    "--profile-active", "35",
]  # fmt: skip

OURS = """
import sys
from overlapscope.cli import main
sys.exit(main(["analyze", sys.argv[1], "--json", "/dev/null", "--no-progress", "--no-cache"]))
"""

HTA = """
import json, logging, sys
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
files = {int(k): v for k, v in json.loads(sys.argv[1]).items()}
ta = TraceAnalysis(trace_files=files, trace_dir=sys.argv[2], include_last_profiler_step=True)
print(ta.get_comm_comp_overlap(visualize=False).to_json(), file=sys.stderr)
"""


def _tree_rss_bytes(pid: int) -> int:
    total = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
            for task in Path(f"/proc/{p}/task").iterdir():
                kids = (task / "children").read_text().split()
                stack.extend(int(k) for k in kids)
        except (OSError, ValueError):
            continue
    return total


def measure(code: str, *args: str) -> dict[str, float]:
    """Wall time, CPU time (user + sys of the process and its waited-for children: robust to
    other load on the machine) and peak summed RSS of one fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    peak = 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            break
        peak = max(peak, _tree_rss_bytes(proc.pid))
        time.sleep(0.02)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed ({proc.returncode}):\n{err[-2000:]}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": peak / 2**20,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--generate", action="store_true", help="create run_dir with the engine")
    ap.add_argument("--no-hta", action="store_true", help="time overlapscope only")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each side (best is kept)")
    args = ap.parse_args()
    if args.generate:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "overlapscope",
                "run",
                *GENERATE,
                "--out",
                str(args.run_dir),
                "--force",
            ],
            check=True,
        )
    meta = read_manifest(args.run_dir)
    assert meta is not None, f"{args.run_dir}: no run.json"
    files = {rank: str((args.run_dir / name).resolve()) for rank, name in enumerate(meta.traces)}
    compressed = sum(Path(f).stat().st_size for f in files.values())
    uncompressed = 0
    for f in files.values():
        with gzip.open(f) as fh:
            while chunk := fh.read(1 << 24):
                uncompressed += len(chunk)
    runs: dict[str, list[dict[str, float]]] = {"overlapscope": [], "hta": []}
    for _ in range(max(args.repeat, 1)):
        runs["overlapscope"].append(measure(OURS, str(args.run_dir)))
        if not args.no_hta:
            runs["hta"].append(measure(HTA, json.dumps(files), str(args.run_dir.resolve())))

    def best(side: str) -> dict[str, float]:
        return {k: min(r[k] for r in runs[side]) for k in ("wall_s", "cpu_s", "peak_rss_mb")}

    ours = best("overlapscope")
    result: dict[str, object] = {
        "run_dir": str(args.run_dir),
        "ranks": len(files),
        "compressed_mb": compressed / 2**20,
        "uncompressed_mb": uncompressed / 2**20,
        "overlapscope": ours,
        "our_peak_over_uncompressed": ours["peak_rss_mb"] / (uncompressed / 2**20),
        "runs": runs,
    }
    if not args.no_hta:
        hta = best("hta")
        result["hta"] = hta
        result["speedup_wall"] = hta["wall_s"] / ours["wall_s"]
        result["speedup_cpu"] = hta["cpu_s"] / ours["cpu_s"]
        result["hta_peak_over_uncompressed"] = hta["peak_rss_mb"] / (uncompressed / 2**20)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
