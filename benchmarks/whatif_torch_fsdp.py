"""Self-replay of torch FSDP1 / FSDP2 runs: each run predicted under its own configuration.

    python benchmarks/whatif_torch_fsdp.py [--repeats 3] [--dim 512] [--layers 4] [--out docs/bench/whatif-torch.json]

Makes real torch FSDP runs on CPU (2 gloo ranks, ``nn.Linear`` stack, profiler on 4 steps),
then ``overlapscope whatif``'s model calibrates each and replays it under the configuration
it found from the collective order. On CPU torch's collectives block their thread, so only
self-replay and link-rate scenarios are meaningful here; cross-policy accuracy needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, kind: str, out: str, port: int, dim: int, layers: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(dim, dim) for _ in range(layers)])
    if kind.startswith("fsdp2"):
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        if kind == "fsdp2-depth2":  # explicit backward prefetch of the next two layers
            layers_ = list(model)
            for i in range(len(layers_) - 1, 0, -1):
                layers_[i].set_modules_to_backward_prefetch(layers_[max(i - 2, 0) : i][::-1])  # type: ignore[operator]
        wrapped: nn.Module = model
    else:
        from torch.distributed.fsdp import BackwardPrefetch
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        inner = nn.Sequential(*[FSDP(x, device_id=torch.device("cpu")) for x in model])
        wrapped = FSDP(inner, device_id=torch.device("cpu"), backward_prefetch=BackwardPrefetch.BACKWARD_PRE)  # fmt: skip
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.01)
    x = torch.randn(64, dim)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=4, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched, record_shapes=True) as prof:  # fmt: skip
        for _ in range(6):
            wrapped(x).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    prof.export_chrome_trace(str(Path(out) / f"rank-{rank}.json"))
    dist.destroy_process_group()


def main(argv: list[str]) -> int:
    from overlapscope.sim import load_calibration, predict_from

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--kinds", default="fsdp1,fsdp2", help="of fsdp1, fsdp2, fsdp2-depth2")
    ap.add_argument("--out", type=Path, default=Path("docs/bench/whatif-torch.json"))
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for kind in args.kinds.split(","):
                d = Path(tmp) / f"{kind}-{rep}"
                d.mkdir()
                mp.spawn(_worker, args=(kind, str(d), _port(), args.dim, args.layers), nprocs=2, join=True)  # fmt: skip
                c = load_calibration(d)
                p = predict_from(c, c.measured.scenario)
                m = c.measured.step_time_us
                rows.append({"kind": kind, "repeat": rep, "found": c.measured.scenario.label,
                             "measured_step_us": m, "replayed_step_us": p.step_time_us,
                             "err_pct": 100 * (p.step_time_us - m) / m})  # fmt: skip
                print(f"{kind} rep {rep}: found {c.measured.scenario.label}, measured {m / 1e3:.1f} ms, "
                      f"replayed {p.step_time_us / 1e3:.1f} ms ({rows[-1]['err_pct']:+.1f} %)")  # fmt: skip
    errs = [abs(r["err_pct"]) for r in rows]
    summary = {"median_abs_err_pct": statistics.median(errs), "worst_abs_err_pct": max(errs), "n": len(errs)}  # fmt: skip
    print(summary)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cmd = f"python benchmarks/whatif_torch_fsdp.py --repeats {args.repeats} --dim {args.dim} --layers {args.layers} --kinds {args.kinds}"  # fmt: skip
    args.out.write_text(json.dumps({"command": cmd, "summary": summary, "runs": rows}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
