"""Staged collectives (engine/staging.py) on real gloo ranks, with copies that land late.

On CUDA a staged collective's device-to-host copy is still running when the collective is
issued. Here a CPU copier performs each "device" copy only when the lane's thread calls
``ready()``: a lane that sent a buffer before its copy was complete would send zeros, and a
training thread that waited for a copy would be named in ``ready_threads``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from overlapscope.engine.comm import Collectives, new_comm_group
from overlapscope.engine.staging import HostStaging
from tests.conftest import spawn


class LateCopier:
    """Host-to-host 'device' copies: D2H done only inside ready(), H2D at once."""

    def __init__(self) -> None:
        self.ready_threads: set[str] = set()

    def host_buffer(self, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype)

    def to_host(self, src: torch.Tensor, dst: torch.Tensor) -> Callable[[], None]:
        snapshot = src.clone()  # what the device copy would read at issue (stream order)

        def ready() -> None:
            self.ready_threads.add(threading.current_thread().name)
            dst.copy_(snapshot)

        return ready

    def to_device(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        dst.copy_(src)


def _worker(rank: int, world: int, out: Path) -> None:
    comm = Collectives(new_comm_group("gloo"), "gloo")
    assert comm.lane is not None
    copier = LateCopier()
    staging = HostStaging(comm.lane, copier)
    n = 5000
    shards = [torch.arange(n, dtype=torch.float32) + 1000 * rank + k for k in range(3)]
    outs = [torch.full((world * n,), -1.0) for _ in shards]
    # three all-gathers in flight, then two reduce-scatters, before any wait
    gathers = [staging.all_gather(o, s) for o, s in zip(outs, shards, strict=True)]
    fulls = [torch.arange(world * n, dtype=torch.float32) * (rank + 1) + k for k in range(2)]
    reduces = [staging.reduce_scatter_sum(f.clone(), n) for f in fulls]
    for w in gathers:
        w.wait()
    results = []
    for w, chunk in reduces:
        w.wait()
        results.append(chunk.clone())
    comm.close()
    expect_gather = [
        torch.cat([torch.arange(n, dtype=torch.float32) + 1000 * r + k for r in range(world)])
        for k in range(3)
    ]
    scale = sum(r + 1 for r in range(world))
    expect_reduce = [
        (torch.arange(world * n, dtype=torch.float32) * scale + world * k)[
            rank * n : (rank + 1) * n
        ]
        for k in range(2)
    ]
    ok = all(torch.equal(o, e) for o, e in zip(outs, expect_gather, strict=True)) and all(
        torch.equal(g, e) for g, e in zip(results, expect_reduce, strict=True)
    )
    torch.save({"ok": ok, "ready_threads": sorted(copier.ready_threads)}, out / f"{rank}.pt")


@pytest.mark.multirank
@pytest.mark.parametrize("world", [2, 3])
def test_staged_collectives_send_only_complete_copies(world: int, tmp_path: Path) -> None:
    spawn(_worker, world, tmp_path)
    for rank in range(world):
        got = torch.load(tmp_path / f"{rank}.pt")
        assert got["ok"], f"rank {rank}: a staged collective moved data before its copy landed"
        # the copies are waited for on the lane's thread only, never the issuing one
        assert got["ready_threads"] == ["ovs-comm-wait"]


def test_one_rank_is_a_device_copy() -> None:
    """World size 1: nothing is staged (no copy to the host, no lane job)."""

    class Lane:
        world_size, rank = 1, 0

    copier = LateCopier()
    staging = HostStaging(Lane(), copier)  # type: ignore[arg-type]
    out = torch.zeros(4)
    staging.all_gather(out, torch.arange(4.0)).wait()
    work, chunk = staging.reduce_scatter_sum(torch.arange(4.0), 4)
    work.wait()
    assert torch.equal(out, torch.arange(4.0)) and torch.equal(chunk, torch.arange(4.0))
    assert copier.ready_threads == set()
