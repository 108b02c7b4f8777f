"""One rank of ``overlapscope bench-collectives``; started inside its lab namespace.

Run as ``python -m overlapscope.lab.bench_worker --rank K --num-ranks N --master-addr A
--master-port P --sizes B1,B2 --iters I --warmup W``. Rank 0 reports to its stdout, one JSON
object per line after the ``OVS-BENCH`` tag: ``{"event": "start", ...}`` before each
measurement and ``{"event": "result", ..., "times_s": [...]}`` after it, where each time is
the maximum over ranks of one iteration. Everything else it prints is free-form log.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

from overlapscope.engine.comm import Collectives, new_comm_group
from overlapscope.engine.p2p import P2PLane
from overlapscope.lab.bench import TAG, Collective


def _emit(event: str, **fields: object) -> None:
    print(TAG + json.dumps({"event": event, **fields}), flush=True)


def _run_once(kind: Collective, lane: P2PLane, shard: torch.Tensor, full: torch.Tensor) -> None:
    """One collective through the engine's own gloo code path, issued and waited at once."""
    match kind:
        case Collective.ALL_GATHER:
            lane.all_gather(full, shard).wait()
        case Collective.REDUCE_SCATTER:
            # The engine's reduce_scatter_mean without its /n scaling (compute, left out).
            lane.reduce_scatter_sum(full).wait()
        case _:
            raise ValueError(f"unknown collective {kind!r}")


def measure(
    kind: Collective, lane: P2PLane, size_bytes: int, iters: int, warmup: int
) -> list[float]:
    """Per-iteration seconds, each the max over ranks, for ``iters`` timed iterations."""
    rank, num_ranks = dist.get_rank(), dist.get_world_size()
    full = torch.rand(size_bytes // 4, dtype=torch.float32)
    shard = full.view(num_ranks, -1)[rank].clone()
    times = torch.zeros(iters, dtype=torch.float64)
    for i in range(warmup + iters):
        dist.barrier()  # sync point (default group): all ranks start the iteration together
        t0 = time.perf_counter()
        _run_once(kind, lane, shard, full)
        dt = time.perf_counter() - t0
        if i >= warmup:
            times[i - warmup] = dt
    # The slowest rank defines the collective's time.
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return [float(t) for t in times]


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m overlapscope.lab.bench_worker")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--num-ranks", type=int, required=True)
    p.add_argument("--master-addr", required=True)
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("--sizes", required=True, help="comma-separated byte counts")
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--warmup", type=int, required=True)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{args.master_addr}:{args.master_port}",
        rank=args.rank,
        world_size=args.num_ranks,
        timeout=timedelta(seconds=120),
    )
    # The engine's communication group (pinned to the lab veth) and its collectives.
    comm = Collectives(new_comm_group("gloo"), "gloo")
    assert comm.lane is not None
    lane = comm.lane
    try:
        for size_bytes in sizes:
            for kind in Collective:
                if args.rank == 0:
                    _emit("start", collective=kind.value, size_bytes=size_bytes)
                times = measure(kind, lane, size_bytes, args.iters, args.warmup)
                if args.rank == 0:
                    _emit("result", collective=kind.value, size_bytes=size_bytes, times_s=times)
    finally:
        comm.close()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
