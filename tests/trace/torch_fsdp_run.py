"""Make real torch FSDP1 / FSDP2 traces on CPU with gloo (2 ranks), for the tests.

Run as a script: ``python tests/trace/torch_fsdp_run.py {fsdp1,fsdp2} OUT_DIR
[--flight-recorder]``. Each rank writes ``rank-<K>.json`` with torch's own
``export_chrome_trace``; the profiler schedule keeps two active steps. ``--flight-recorder``:
each rank also writes its Flight Recorder dump, ``comm_traces/rank_<K>``
(overlapscope/flight/).
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from overlapscope.flight.capture import enable, write_dump

NUM_LAYERS = 3
DIM = 64


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(DIM, DIM) for _ in range(NUM_LAYERS)])


def _wrap(kind: str, model: nn.Sequential) -> nn.Module:
    if kind == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        return model
    from torch.distributed.fsdp import BackwardPrefetch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    wrapped = nn.Sequential(*[FSDP(layer, device_id=torch.device("cpu")) for layer in model])
    return FSDP(
        wrapped,
        device_id=torch.device("cpu"),
        backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
    )


def _worker(rank: int, kind: str, out: str, port: int, flight: bool = False) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    if flight:
        enable(1000)  # (read when the process group is made)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    model = _wrap(kind, _model())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, DIM)
    sched = torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched, record_shapes=True
    ) as prof:
        for _ in range(3):
            loss = model(x).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    prof.export_chrome_trace(str(Path(out) / f"rank-{rank}.json"))
    dist.barrier()
    if flight:
        write_dump(Path(out), rank)
    dist.destroy_process_group()
    # Skip the interpreter's teardown, where gloo's C++ threads intermittently abort a
    # finished rank (SIGABRT), as tests/conftest.py's spawn does.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def make_traces(kind: str, out: Path, flight: bool = False) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(_worker, args=(kind, str(out), _free_port(), flight), nprocs=2, join=True)
    return [out / f"rank-{r}.json" for r in range(2)]


if __name__ == "__main__":
    make_traces(sys.argv[1], Path(sys.argv[2]), flight="--flight-recorder" in sys.argv[3:])
