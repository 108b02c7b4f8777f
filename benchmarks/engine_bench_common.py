"""What the engine benchmarks share (benchmarks/engine_bench.py): the benchmark model and
training flags, running ``overlapscope`` commands, per-run metrics read from ``run.json`` and
``analysis.json``, ratio statistics over repeats, and writing ``docs/bench/<name>.json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from overlapscope.config import ProfileWindow
from overlapscope.manifest import RunManifest, read_manifest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "bench"
# GPT 4 x 256 (one block: 0.79 M params, 3.2 MB fp32), seq 128, global batch 4: per block,
# the backward compute on one core and a 1 Gbit/s all-gather are of the same order.
MODEL = ["--model", "gpt", "--layers", "4", "--dim", "256", "--heads", "4", "--seq-len", "128"]
TRAIN = ["--global-batch", "4", "--steps", "8", "--profile-wait", "2", "--profile-warmup", "1"]
TRAIN += ["--profile-active", "2"]
POLICIES = ["none", "backward_post", "backward_pre"]
LIMITED = ["backward_pre+limit=2", "backward_pre+limit=1"]  # rate limiter, K = 2 and 1


def link_args(link: str) -> list[str]:
    return [] if link == "none" else ["--link-gbit", link]


def link_label(link: str) -> str:
    return "loopback (unshaped)" if link == "none" else f"{link} Gbit/s"


def overlapscope(*args: str) -> None:
    cmd = [sys.executable, "-m", "overlapscope", *args]
    print("$", " ".join(cmd[2:]), file=sys.stderr, flush=True)
    if subprocess.run(cmd, stdout=subprocess.DEVNULL, cwd=REPO).returncode != 0:
        # A rank occasionally aborts at exit on this shared machine (see the report); the
        # retry is announced, never silent.
        print("! failed; retrying once", file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=REPO)


# -- per-run metrics ---------------------------------------------------------------------


def manifest_of(run_dir: Path) -> RunManifest:
    """The run's ``run.json``, typed; a run without one is a failed benchmark."""
    m = read_manifest(run_dir)
    if m is None:
        raise RuntimeError(f"{run_dir}: overlapscope run wrote no run.json")
    return m


def run_step_times_ms(run_dir: Path) -> dict[str, float]:
    """:func:`step_times_ms` of an ``overlapscope run`` directory, from its ``run.json``."""
    m = manifest_of(run_dir)
    if m.config is None:
        raise RuntimeError(f"{run_dir}: run.json has no config")
    return step_times_ms(m.step_time_us, m.config.window, m.profiled_steps)


def step_times_ms(
    step_time_us: Sequence[Sequence[float]], window: ProfileWindow, profiled: Sequence[int]
) -> dict[str, float]:
    """``clean`` and ``profiled`` step time (slowest rank per step, median over steps)."""
    per_step = np.asarray(step_time_us, dtype=float).max(axis=0) / 1e3
    profiler_steps = set(range(window.steps_needed))
    clean = [s for s in range(1, len(per_step)) if s not in profiler_steps]
    profiled = list(profiled)
    return {
        "clean_ms": float(np.median(per_step[clean])),
        "profiled_ms": float(np.median(per_step[profiled])),
    }


def analysis_json(run_dir: Path) -> dict[str, Any]:
    out = run_dir / "analysis.json"
    if not out.exists():
        overlapscope("analyze", str(run_dir), "--json", str(out))
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def exposed_bwd_ag_ms(analysis: dict[str, Any]) -> float:
    """Exposed backward all-gather per step, mean over ranks."""
    rows = [u for u in analysis["units"] if u["phase"] == "ag_bwd"]
    num_ranks = len(analysis["ranks"])
    return sum(u["exposed_per_step_us"] for u in rows) / num_ranks / 1e3


def ratio_stats(values: Sequence[float]) -> dict[str, float]:
    v = np.asarray(values, dtype=float)
    return {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max())}


def fmt(s: dict[str, float], digits: int = 2) -> str:
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}..{s['max']:.{digits}f})"


def save(name: str, result: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
