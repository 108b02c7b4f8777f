"""Clock alignment and critical path: recovery error vs injected offset and drift, and cost.

    python benchmarks/clock_alignment.py [--out FILE.json] [--repeat 3] [--only-cost]
        [--runs-dir DIR]

Recovery: whole ranks of real runs get a known clock offset and drift (``t -> t + offset +
drift * t``); the recovered offset is the shifted run's estimate minus the recorded run's, at
every matched collective of that rank; the error is its largest distance from the injected
offset there. Runs: the four shipped 2-rank runs (traces/), a tiny 4-rank run of ours and a
tiny torch FSDP2 run (both made here, one host), and a 2-rank GPU run assembled from HTA's
``hta-trace-diff-test-rank1`` (the real rank-1 GPU trace taken twice, as rank 0 and rank 1:
its NCCL kernels end at the same instants on both, which is the ideal case; the shared
traces hold one rank per run, so no real multi-rank GPU run is available).

Cost: best of ``--repeat`` wall times and, separately, best of ``--repeat`` CPU times (this
process's) of ``analyze`` (alignment and critical path included), and of ``align_run`` and
``critical_path`` alone, per run; their share of ``analyze`` alone (wall and CPU) and of load +
``analyze`` (wall: what the ``analyze`` command waits for; one load). ``--only-cost`` skips
the recovery sweep. Printed as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from overlapscope.analysis.api import analyze
from overlapscope.analysis.clocks.alignment import align_run, estimate_offsets, offset_at
from overlapscope.analysis.collectives.matched import matched_ends
from overlapscope.analysis.critical_path.path import critical_path
from overlapscope.trace.run.loader import RunTraces, load_run

REPO = Path(__file__).resolve().parents[1]
EXTERNAL = REPO.parent / "shared" / "external-traces" / "hta-trace-diff-test-rank1.json.gz"
OFFSETS_US = (50.0, -50.0, 1000.0, -1000.0, 20000.0, -20000.0)
DRIFTS_PPM = (0.0, 10.0, 100.0, -100.0, 1000.0)
# 16 units, 12 profiled steps: 217k events, 600 matched collectives per rank.
LONGER = [
    "--nproc", "2", "--model", "gpt", "--layers", "16", "--dim", "64", "--heads", "2",
    "--seq-len", "16", "--vocab", "256", "--global-batch", "4", "--steps", "14",
    "--profile-wait", "1", "--profile-warmup", "1", "--profile-active", "12",
]  # fmt: skip
TINY_4 = [
    "--nproc",
    "4",
    "--model",
    "mlp",
    "--layers",
    "2",
    "--dim",
    "64",
    "--global-batch",
    "8",
    "--steps",
    "4",
]


def inject(run: RunTraces, rank: int, offset_us: float, ppm: float) -> RunTraces:
    ev = run.events
    mine = (ev["rank"] == rank).to_numpy()
    shift = np.where(mine, offset_us + ppm * 1e-6 * ev["ts_us"].to_numpy(), 0.0)
    return dataclasses.replace(
        run, events=ev.assign(ts_us=ev["ts_us"] + shift, end_us=ev["end_us"] + shift)
    )


def recovery_error(run: RunTraces, rank: int, offset_us: float, ppm: float) -> tuple[float, bool]:
    """Largest error over the rank's collectives, and whether every one is within the bar
    (20 µs or 5% of the offset injected there, whichever is larger)."""
    ends = matched_ends(run.events)[rank].dropna().to_numpy()
    ranks = np.full(len(ends), rank)
    injected = offset_us + ppm * 1e-6 * ends
    base = offset_at(estimate_offsets(run.events), ranks, ends)
    # the moved run's estimate applies to its own (moved) clock
    moved_run = inject(run, rank, offset_us, ppm)
    moved = offset_at(estimate_offsets(moved_run.events), ranks, ends + injected)
    err = np.abs(moved - base - injected)
    return float(err.max()), bool((err <= np.maximum(20.0, 0.05 * np.abs(injected))).all())


def gpu_pair() -> RunTraces:
    one = load_run(EXTERNAL)
    other = one.events.assign(rank=np.int32(0))
    events = pd.concat([other, one.events], ignore_index=True)
    for c in ("cat", "name", "lane", "phase", "unit", "kind", "group"):
        events[c] = events[c].astype(one.events[c].dtype)
    ranks = (dataclasses.replace(one.ranks[0], rank=0), one.ranks[0])
    return dataclasses.replace(one, events=events, ranks=ranks, world_size=2)


def best(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Best of ``repeat`` runs: ``(wall seconds, CPU seconds of this process)``, each the
    minimum over the runs (on a shared, loaded machine the CPU time is the steadier)."""
    walls, cpus = [], []
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
    return min(walls), min(cpus)


def cost(run: RunTraces, repeat: int, load_s: float) -> dict[str, float]:
    aligned, _ = align_run(run)
    total, total_cpu = best(lambda: analyze(run), repeat)
    t_align, t_align_cpu = best(lambda: align_run(run), repeat)
    t_path, t_path_cpu = best(lambda: critical_path(aligned.events), repeat)
    return {
        "num_ranks": len(run.ranks),
        "num_events": len(run.events),
        "analyze_s": total,
        "align_s": t_align,
        "critical_path_s": t_path,
        "share_of_analyze": (t_align + t_path) / total,
        "analyze_cpu_s": total_cpu,
        "align_cpu_s": t_align_cpu,
        "critical_path_cpu_s": t_path_cpu,
        "share_of_analyze_cpu": (t_align_cpu + t_path_cpu) / total_cpu,
        "load_s": load_s,
        "share_of_load_and_analyze": (t_align + t_path) / (total + load_s),
    }


def make(cmd: list[str], out: Path) -> None:
    """Record a run into ``out`` unless it is already there (``--runs-dir``: two versions of
    the code are then timed on the same recorded runs)."""
    if out.exists():
        return
    subprocess.run([*cmd, str(out)], check=True, capture_output=True, timeout=600)


def timed_load(path: Path) -> tuple[RunTraces, float]:
    t0 = time.perf_counter()
    run = load_run(path, progress=False)
    return run, time.perf_counter() - t0


def runs(tmp: Path) -> dict[str, tuple[RunTraces, float]]:
    """Every run with its load time (the load the ``analyze`` command does first)."""
    out = {n: timed_load(REPO / "traces" / n) for n in ("backward_pre", "none", "backward_post")}
    make([sys.executable, "-m", "overlapscope", "run", *TINY_4, "--out"], tmp / "r4")
    out["ours-4-ranks"] = timed_load(tmp / "r4")
    make([sys.executable, "-m", "overlapscope", "run", *LONGER, "--out"], tmp / "long")
    out["ours-2-ranks-12-steps"] = timed_load(tmp / "long")
    script = REPO / "tests" / "trace" / "torch_fsdp_run.py"
    make([sys.executable, str(script), "fsdp2"], tmp / "fsdp2")
    out["torch-fsdp2"] = timed_load(tmp / "fsdp2")
    if EXTERNAL.is_file():
        t0 = time.perf_counter()
        pair = gpu_pair()
        out["hta-gpu-rank1-twice"] = (pair, time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only-cost", action="store_true", help="skip the recovery sweep")
    ap.add_argument(
        "--runs-dir", type=Path, help="keep the recorded runs here and reuse them (default: temp)"
    )
    args = ap.parse_args()
    result: dict[str, Any] = {"recovery": [], "cost": {}, "same_host_offsets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        if args.runs_dir:
            args.runs_dir.mkdir(parents=True, exist_ok=True)
        loaded = runs(args.runs_dir or Path(tmp))
        for name, (run, load_s) in loaded.items():
            off = estimate_offsets(run.events)
            result["same_host_offsets"][name] = json.loads(off.to_json(orient="records"))
            rank = max(r.rank for r in run.ranks)
            for o in () if args.only_cost else OFFSETS_US:
                for ppm in DRIFTS_PPM:
                    err, ok = recovery_error(run, rank, o, ppm)
                    result["recovery"].append(
                        {
                            "run": name,
                            "rank": rank,
                            "offset_us": o,
                            "drift_ppm": ppm,
                            "max_error_us": err,
                            "within_bar": ok,
                        }
                    )
            result["cost"][name] = cost(run, args.repeat, load_s)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
