"""One rank of ``overlapscope bench-collectives``; started inside its lab namespace.

Run as ``python -m overlapscope.bench.worker --rank K --num-ranks N --master-addr A
--master-port P --sizes B1,B2 --iters I --warmup W``. Rank 0 reports to its stdout, one JSON
object per line after the ``OVS-BENCH`` tag: ``{"event": "start", ...}`` before each
measurement and ``{"event": "result", ..., "times_s": [...], "wire_tx_bytes": [...]}`` after
it, where each time is the maximum over ranks of one iteration and ``wire_tx_bytes[k]`` is what
rank ``k``'s network interface transmitted per iteration (frames, headers included; null
outside the lab, where the interface is unknown). Everything else it prints is free-form log.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from overlapscope.bench.collectives import BENCHED, TAG
from overlapscope.engine.comm import Collectives, new_comm_group
from overlapscope.engine.p2p import P2PLane
from overlapscope.phases import CollectiveKind


def _emit(event: str, **fields: object) -> None:
    print(TAG + json.dumps({"event": event, **fields}), flush=True)


def _run_once(kind: CollectiveKind, lane: P2PLane, shard: torch.Tensor, full: torch.Tensor) -> None:
    """One collective through the engine's own gloo code path, issued and waited at once."""
    match kind:
        case CollectiveKind.ALL_GATHER:
            lane.all_gather(full, shard).wait()
        case CollectiveKind.REDUCE_SCATTER:
            # The engine's reduce_scatter_mean without its /n scaling (compute, left out).
            lane.reduce_scatter_sum(full).wait()
        case _:
            raise ValueError(f"unknown collective {kind!r}")


def _tx_bytes() -> int:
    """Bytes this rank's lab interface has transmitted so far; -1 where there is none.

    Inside the lab each rank runs in its own network namespace (``ip netns exec`` mounts that
    namespace's ``/sys``), and gloo is pinned to ``GLOO_SOCKET_IFNAME``."""
    ifname = os.environ.get("GLOO_SOCKET_IFNAME")
    counter = Path(f"/sys/class/net/{ifname}/statistics/tx_bytes")
    if not ifname or not counter.is_file():
        return -1
    return int(counter.read_text())


def measure(
    kind: CollectiveKind, lane: P2PLane, size_bytes: int, iters: int, warmup: int
) -> tuple[list[float], list[float] | None]:
    """Per-iteration seconds (each the max over ranks) for ``iters`` timed iterations, and each
    rank's transmitted bytes per iteration (all iterations, barriers included), or None."""
    rank, num_ranks = dist.get_rank(), dist.get_world_size()
    full = torch.rand(size_bytes // 4, dtype=torch.float32)
    shard = full.view(num_ranks, -1)[rank].clone()
    times = torch.zeros(iters, dtype=torch.float64)
    tx_before = _tx_bytes()
    for i in range(warmup + iters):
        dist.barrier()  # sync point (default group): all ranks start the iteration together
        t0 = time.perf_counter()
        _run_once(kind, lane, shard, full)
        dt = time.perf_counter() - t0
        if i >= warmup:
            times[i - warmup] = dt
    # sync point: a rank's send is complete once its bytes sit in the socket buffer; after
    # this barrier every rank has received all of them, so they have crossed the interface.
    dist.barrier()
    tx = torch.zeros(num_ranks, dtype=torch.float64)
    tx[rank] = (_tx_bytes() - tx_before) / (warmup + iters) if tx_before >= 0 else -1.0
    # The slowest rank defines the collective's time.
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    dist.all_reduce(tx, op=dist.ReduceOp.SUM)
    wire = None if bool((tx < 0).any()) else [float(b) for b in tx]
    return [float(t) for t in times], wire


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m overlapscope.bench.worker")
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
            for kind in BENCHED:
                if args.rank == 0:
                    _emit("start", collective=kind.value, size_bytes=size_bytes)
                times, wire = measure(kind, lane, size_bytes, args.iters, args.warmup)
                if args.rank == 0:
                    _emit(
                        "result",
                        collective=kind.value,
                        size_bytes=size_bytes,
                        times_s=times,
                        wire_tx_bytes=wire,
                    )
    finally:
        comm.close()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without the interpreter's teardown, where gloo's C++ threads intermittently abort
    # a finished rank (as in engine/worker.py); an exception above exits as usual.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
