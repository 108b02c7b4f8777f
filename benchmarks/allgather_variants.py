"""All-gather built several ways over gloo, side by side in one lab (docs/LAB.md, "Resolution").

    python benchmarks/allgather_variants.py --nproc 2 --link-gbit 0.2 --size-mb 16   # as root

Each variant gathers the same bytes on the same process group; per variant: median of 4 timed
iterations after a warm-up, slowest rank, busbw = size/time * (n-1)/n, as a share of the link.
Variants: gloo's ``_allgather_base`` (whole, or split into 8 / 32 sequential calls),
``alltoall_base``, and ``send``/``recv``: a ring one round after the other (whole, or in 8 /
32 pieces), and every peer at once.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

WORKER = "worker"


def _worker(rank: int, n: int, addr: str, port: int, size: int, link: float | None) -> None:
    import torch
    import torch.distributed as dist

    from overlapscope.engine.comm import new_comm_group

    dist.init_process_group(
        "gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=n,
        timeout=timedelta(seconds=300),
    )  # fmt: skip
    g = new_comm_group("gloo")
    full = torch.zeros(size // 4)
    shard = torch.rand(size // 4 // n)
    blocks = full.view(n, -1)
    variants = _variants(g, rank, n, full, shard, blocks)
    expected = torch.empty(n, shard.numel())
    dist.all_gather(list(expected.unbind(0)), shard)
    _time_variants(variants, rank, n, size, link, full, blocks, expected)
    g.shutdown()
    dist.destroy_process_group()


def _variants(
    g: Any, rank: int, n: int, full: Any, shard: Any, blocks: Any
) -> dict[str, Callable[[], None]]:
    """Each way to gather ``shard`` from every rank into ``full`` (``blocks``: its rows, one
    per rank)."""
    import torch

    left, right = (rank - 1) % n, (rank + 1) % n

    def base() -> None:
        g._allgather_base(full, shard).wait()

    def split(k: int) -> Callable[[], None]:
        def run() -> None:
            pieces = shard.chunk(k)
            outs = [torch.empty(p.numel() * n) for p in pieces]
            for o, p in zip(outs, pieces, strict=True):
                g._allgather_base(o, p).wait()
            off = 0
            for o, p in zip(outs, pieces, strict=True):
                blocks[:, off : off + p.numel()].copy_(o.view(n, -1))
                off += p.numel()

        return run

    def a2a() -> None:
        g.alltoall_base(full, shard.repeat(n), [], []).wait()

    def ring(k: int) -> Callable[[], None]:
        def run() -> None:
            blocks[rank].copy_(shard)
            for s in range(n - 1):
                send, recv = blocks[(rank - s) % n].chunk(k), blocks[(rank - s - 1) % n].chunk(k)
                works = [g.recv([r], left, j) for j, r in enumerate(recv)]
                works += [g.send([t], right, j) for j, t in enumerate(send)]
                for w in works:
                    w.wait()

        return run

    def every_peer() -> None:
        blocks[rank].copy_(shard)
        peers = [p for p in range(n) if p != rank]
        works = [g.recv([blocks[p]], p, 0) for p in peers] + [g.send([shard], p, 0) for p in peers]
        for w in works:
            w.wait()

    return {
        "_allgather_base": base,
        "_allgather_base x8 sequential": split(8),
        "_allgather_base x32 sequential": split(32),
        "alltoall_base": a2a,
        "send/recv ring": ring(1),
        "send/recv ring, 8 pieces": ring(8),
        "send/recv ring, 32 pieces": ring(32),
        "send/recv every peer at once": every_peer,
    }


def _time_variants(
    variants: dict[str, Callable[[], None]], rank: int, n: int, size: int, link: float | None,
    full: Any, blocks: Any, expected: Any,
) -> None:  # fmt: skip
    """Time each variant (slowest rank, median after a warm-up); rank 0 prints one line each."""
    import torch
    import torch.distributed as dist

    for name, fn in variants.items():
        times = []
        for _ in range(5):
            full.zero_()
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        t = torch.tensor(times[1:], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        ok = torch.equal(blocks, expected)
        if rank == 0:
            med = float(t.median())
            busbw = size * 8 / med / 1e9 * (n - 1) / n
            share = "" if link is None else f" = {busbw / link:.0%} of the link"
            print(f"{name:32} {med * 1e3:8.1f} ms  busbw {busbw:.3f} Gbit/s{share}  correct={ok}")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == WORKER:
        r, n, addr, port, size = (int(sys.argv[2]), int(sys.argv[3]), sys.argv[4],
                                  int(sys.argv[5]), int(sys.argv[6]))  # fmt: skip
        _worker(r, n, addr, port, size, None if sys.argv[7] == "none" else float(sys.argv[7]))
        return 0
    from overlapscope.lab import shaped_network

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--link-gbit", type=float, default=0.2)
    ap.add_argument("--size-mb", type=int, default=16)
    args = ap.parse_args()
    size = args.size_mb * 2**20 // (4 * args.nproc) * 4 * args.nproc
    link = str(args.link_gbit)
    with tempfile.TemporaryDirectory() as logs, shaped_network(args.nproc, args.link_gbit) as lab:
        codes = lab.run_ranks(
            lambda slot: [
                sys.executable,
                __file__,
                WORKER,
                str(slot.rank),
                str(args.nproc),
                lab.master_addr,
                "29611",
                str(size),
                link,
            ],
            {},
            Path(logs),
            900,
            on_rank0_line=print,
        )
    return 0 if codes == [0] * args.nproc else 1


if __name__ == "__main__":
    raise SystemExit(main())
