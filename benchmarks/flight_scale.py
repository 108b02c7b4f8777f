"""Flight Recorder dumps at scale: 64 ranks x 20,000 entries, ours against torch's fr_trace.

    python benchmarks/flight_scale.py [--ranks 64] [--entries 20000] [--dir DIR] [--keep]

The dumps are made from the real entries of the shipped sample's rank 0
(traces/flight-fsdp2-gloo2-slow/comm_traces/rank_0, torch 2.13's own pickle): its steps
repeated until each rank holds ``--entries`` entries (a full 20,000-entry ring buffer, as
torchtitan keeps), every entry a fresh copy (its frames new dicts, as torch writes them),
sequence numbers running on, issue times the step's own plus a per-rank jitter, rank 1 late
by 30 ms on one collective of each step. ``pg_config`` names the default group as NCCL
dumps do (``"0"``): torch 2.13's gloo dumps name it ``""``, on which fr_trace raises
``KeyError: ('0', 0)``.

Each tool runs in a fresh process on the same directory: ``overlapscope analyze DIR --json
/dev/null`` (read, match, align, findings) and ``python -m
torch.distributed.flight_recorder.fr_trace DIR --prefix rank_`` (read, match, mismatch
check). CPU time is the child's user + system (getrusage), peak memory its max RSS; per
rank: divided by ``--ranks``. Printed as JSON.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "traces" / "flight-fsdp2-gloo2-slow" / "comm_traces" / "rank_0"
STEP_NS = 60_000_000
LATE_NS = 30_000_000


def _step_entries(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The entries of one whole step of the real dump (its second: the first all-gather
    of a step follows a reduce-scatter)."""
    entries = doc["entries"]
    starts = [
        i for i, e in enumerate(entries)
        if "pre_forward" in {f["name"] for f in e["frames"]}
        and (i == 0 or "pre_forward" not in {f["name"] for f in entries[i - 1]["frames"]})
    ]  # fmt: skip
    return entries[starts[1] : starts[2]]


def _as_nccl(e: dict[str, Any], ranks: int) -> None:
    """Sizes and names as an NCCL rank of ``ranks`` records them: gloo names its
    reduce-scatter an all-reduce (fr_trace then reports a size mismatch on every one)."""
    n = e["input_sizes"][0][0] if e["input_sizes"] else 0
    if "reduce_scatter" in {f["name"] for f in e["frames"]} or "foreach_reduce" in {
        f["name"] for f in e["frames"]
    }:
        shard = n // 2  # the real run's 2 ranks
        e.update(profiling_name="nccl:reduce_scatter", input_sizes=[[shard * ranks]],
                 output_sizes=[[shard]])  # fmt: skip
    elif e["profiling_name"].endswith("all_gather"):
        e.update(profiling_name="nccl:all_gather", output_sizes=[[n * ranks]])
    else:
        e["profiling_name"] = e["profiling_name"].replace("gloo:", "nccl:")


def make_dumps(out: Path, ranks: int, num_entries: int) -> int:
    """Write the dumps; the bytes of one."""
    doc = pickle.loads(SOURCE.read_bytes())
    step = _step_entries(doc)
    for e in step:
        _as_nccl(e, ranks)
    t0 = step[0]["time_created_ns"]
    offsets = [e["time_created_ns"] - t0 for e in step]
    rng = np.random.default_rng(0)
    (out / "comm_traces").mkdir(parents=True, exist_ok=True)
    size = 0
    for rank in range(ranks):
        entries = []
        jitter = rng.integers(0, 200_000, num_entries)
        for i in range(num_entries):
            e = copy.deepcopy(step[i % len(step)])
            late = LATE_NS if rank == 1 and i % len(step) == 2 else 0
            e.update(
                collective_seq_id=i + 1, record_id=i, op_id=i + 1,
                time_created_ns=t0 + (i // len(step)) * STEP_NS + offsets[i % len(step)]
                + int(jitter[i]) + late,
            )  # fmt: skip
            entries.append(e)
        dump = {**doc, "entries": entries,
                "pg_config": {"0": {"name": "0", "desc": "default_pg",
                                    "ranks": str(list(range(ranks)))}}}  # fmt: skip
        data = pickle.dumps(dump)
        (out / "comm_traces" / f"rank_{rank}").write_bytes(data)
        size = len(data)
    return size


def _child(cmd: list[str]) -> int:
    """Run ``cmd``; print its wall, CPU and peak RSS (this process has no other child)."""
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"rc": r.returncode, "wall_s": wall, "cpu_s": u.ru_utime + u.ru_stime,
                      "peak_rss_mb": u.ru_maxrss / 1024, "output_tail": (r.stdout + r.stderr)[-300:]}))  # fmt: skip
    return 0


def measure(cmd: list[str]) -> dict[str, Any]:
    """Wall, CPU (user + system) and peak RSS of ``cmd``, in a fresh process of its own."""
    r = subprocess.run([sys.executable, __file__, "--child", *cmd], capture_output=True,
                       text=True, check=True)  # fmt: skip
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--entries", type=int, default=20_000)
    p.add_argument("--dir", type=Path, help="where the dumps go (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the dumps")
    a = p.parse_args(argv)
    out = a.dir or Path(tempfile.mkdtemp(prefix="flight-scale-"))
    t0 = time.perf_counter()
    size = make_dumps(out, a.ranks, a.entries)
    made = time.perf_counter() - t0
    ours = measure(
        [sys.executable, "-m", "overlapscope", "analyze", str(out), "--json", os.devnull]
    )
    torch_fr = measure([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace",
                        str(out / "comm_traces"), "--prefix", "rank_"])  # fmt: skip
    result = {"ranks": a.ranks, "entries_per_rank": a.entries, "dump_mb": size / 1e6,
              "make_s": made, "overlapscope": ours, "fr_trace": torch_fr}  # fmt: skip
    for name in ("overlapscope", "fr_trace"):
        m = result[name]
        m["cpu_ms_per_rank"] = 1e3 * m["cpu_s"] / a.ranks
        m["peak_rss_mb_per_rank"] = m["peak_rss_mb"] / a.ranks
    print(json.dumps(result, indent=1))
    if not a.keep:
        shutil.rmtree(out, ignore_errors=True)
    return 0 if ours["rc"] == 0 and torch_fr["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
