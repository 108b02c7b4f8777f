"""Real torch FSDP1 / FSDP2 runs on CPU with gloo that write Flight Recorder dumps, for the
tests of ``overlapscope/flight/``.

``python tests/flight/gloo_run.py KIND OUT_DIR [--ranks N] [--steps S] [--slow-rank R]
[--hang-rank R] [--profile] [--buffer E]``: N ranks (default 2) of a 3-layer model under FSDP2
(``fully_shard`` per layer) or FSDP1, S steps; each rank writes ``comm_traces/rank_<K>``
(torch's own pickle). ``--slow-rank R``: rank R sleeps 30 ms before layer 1's forward every
step (it issues that layer's all-gather late). ``--hang-rank R``: rank R stops before the
last step's last collective; the others' collective times out (gloo, 4 s) and each rank
dumps what it recorded. ``--profile``: a torch.profiler trace per rank beside the dumps.
``--buffer E``: the ring buffer's entries (default 1000).
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from overlapscope.flight.capture import enable, write_dump

DIM = 64
NUM_LAYERS = 3
SLOW_S = 0.03
HANG_TIMEOUT_S = 4.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wrap(kind: str, model: nn.Sequential) -> nn.Module:
    if kind == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        return model
    from torch.distributed.fsdp import BackwardPrefetch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    cpu = torch.device("cpu")
    inner = nn.Sequential(*[FSDP(layer, device_id=cpu) for layer in model])
    return FSDP(inner, device_id=cpu, backward_prefetch=BackwardPrefetch.BACKWARD_PRE)


def _slow(_module: nn.Module, _inputs: object) -> None:
    time.sleep(SLOW_S)  # this rank reaches layer 1's all-gather late


def _step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    loss = model(x).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()


def _worker(rank: int, a: argparse.Namespace, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    enable(a.buffer)
    timeout = datetime.timedelta(seconds=HANG_TIMEOUT_S if a.hang_rank is not None else 300)
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks, timeout=timeout)
    torch.manual_seed(0)
    layers = nn.Sequential(*[nn.Linear(DIM, DIM) for _ in range(NUM_LAYERS)])
    if rank == a.slow_rank:
        layers[1].register_forward_pre_hook(_slow)
    model = _wrap(a.kind, layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, DIM)
    out = Path(a.out)
    if a.profile:
        sched = torch.profiler.schedule(wait=0, warmup=1, active=a.steps - 1, repeat=1)
        acts = [torch.profiler.ProfilerActivity.CPU]
        with torch.profiler.profile(activities=acts, schedule=sched) as prof:
            for _ in range(a.steps):
                _step(model, opt, x)
                prof.step()
        prof.export_chrome_trace(str(out / f"rank-{rank}.json"))
    else:
        for _ in range(a.steps - 1):
            _step(model, opt, x)
        _last_step(rank, a, model, opt, x)
    if a.hang_rank is None:
        dist.barrier()  # (after a hang the group has timed out: nothing more to wait for)
    write_dump(out, rank)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # (gloo's threads can abort a finished rank at teardown)


def _last_step(
    rank: int, a: argparse.Namespace, model: nn.Module, opt: torch.optim.Optimizer,
    x: torch.Tensor,
) -> None:  # fmt: skip
    """The last step; the hang rank stops before its optimizer's last collective."""
    if rank != a.hang_rank:
        try:
            _step(model, opt, x)
            dist.all_reduce(torch.ones(1))  # the collective the stopped rank never issues
        except RuntimeError:
            pass  # gloo's timeout: the stopped rank never came
        return
    loss = model(x).sum()
    loss.backward()
    opt.step()
    write_dump(Path(a.out), rank)  # what an on-demand dump of the stopped rank shows
    time.sleep(HANG_TIMEOUT_S + 4)  # ... stopped until the job is killed
    os._exit(0)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["fsdp1", "fsdp2"])
    p.add_argument("out")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--slow-rank", type=int)
    p.add_argument("--hang-rank", type=int)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--buffer", type=int, default=1000, help="TORCH_FR_BUFFER_SIZE")
    a = p.parse_args(argv)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    mp.spawn(_worker, args=(a, _free_port()), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    main(sys.argv[1:])
