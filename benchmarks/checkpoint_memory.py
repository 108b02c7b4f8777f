"""Peak memory with activation checkpointing vs without, against the activations it drops.

Runs the engine (2 ranks, CPU) with ``--checkpoint-units none|every-2|all``, interleaved over
repeats, reads each rank's ``peak_mem_bytes`` from run.json (profiler memory events), and
compares the saving with the bytes one unit saves for backward, measured in one process with
``torch.autograd.graph.saved_tensors_hooks`` on a block of the same shape (local batch).

    python benchmarks/checkpoint_memory.py [--repeats 2] [--out docs/bench/checkpoint_memory.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from overlapscope.config import ModelConfig
from overlapscope.engine.workloads import Block
from overlapscope.manifest import read_manifest

MODEL = {"layers": 4, "dim": 256, "heads": 4, "seq_len": 256}
GLOBAL_BATCH = 8
NPROC = 2
SPECS = ["none", "every-2", "all"]


def saved_bytes_per_unit() -> int:
    """Bytes a block saves for backward (its activations), parameters excluded."""
    cfg = ModelConfig(**MODEL)  # type: ignore[arg-type]
    block = Block(cfg.dim, cfg.heads)
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes()
        return t

    x = torch.randn(GLOBAL_BATCH // NPROC, cfg.seq_len, cfg.dim, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x).sum().backward()
    return sum(seen.values())


def run_once(spec: str, out: Path) -> list[int]:
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in MODEL.items()]
    cmd = [sys.executable, "-m", "overlapscope", "run", "--nproc", str(NPROC), *flags,
           "--global-batch", str(GLOBAL_BATCH), "--steps", "4", "--policy", "backward_pre",
           "--checkpoint-units", spec, "--out", str(out), "--force"]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    m = read_manifest(out)
    assert m is not None, f"{out}: overlapscope run wrote no run.json"
    return list(m.peak_mem_bytes)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("docs/bench/checkpoint_memory.json"))
    args = p.parse_args()
    peaks: dict[str, list[int]] = {s: [] for s in SPECS}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for spec in SPECS:  # interleaved: A B C A B C
                peaks[spec] += run_once(spec, Path(tmp) / spec)
    per_unit = saved_bytes_per_unit()
    base = statistics.median(peaks["none"])
    rows = []
    for spec in SPECS:
        n_ckpt = {"none": 0, "every-2": (MODEL["layers"] + 1) // 2, "all": MODEL["layers"]}[spec]
        med = statistics.median(peaks[spec])
        rows.append(
            {
                "checkpoint_units": spec,
                "peak_mib_median": med / 2**20,
                "peak_mib_min_max": [min(peaks[spec]) / 2**20, max(peaks[spec]) / 2**20],
                "saving_mib": (base - med) / 2**20,
                "activations_dropped_mib": n_ckpt * per_unit / 2**20,
            }
        )
    doc = {"model": MODEL, "global_batch": GLOBAL_BATCH, "nproc": NPROC,
           "repeats": args.repeats, "saved_bytes_per_unit": per_unit, "rows": rows}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print("| --checkpoint-units | peak MiB (median, min-max over ranks x repeats) | saving vs none "
          "| activations of the checkpointed units |")  # fmt: skip
    print("|---|---|---|---|")
    for r in rows:
        lo, hi = r["peak_mib_min_max"]
        print(f"| {r['checkpoint_units']} | {r['peak_mib_median']:.1f} ({lo:.1f}-{hi:.1f}) "
              f"| {r['saving_mib']:.1f} MiB | {r['activations_dropped_mib']:.1f} MiB |")  # fmt: skip


if __name__ == "__main__":
    main()
