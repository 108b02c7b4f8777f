"""Asynchronous collectives for the engine, one process group = one ordered queue.

Both backends return work handles and never block the issuing thread; the training thread
waits on a handle only where it needs the data:

- CUDA + NCCL: each collective runs on the process group's own NCCL stream, ordered after
  the work already queued on the issuing (compute) stream. ``handle.wait()`` makes the
  *compute stream* wait on that NCCL stream (a device-side dependency, no CPU sync). All
  collectives of one group serialise on its stream in issue order, as in torch FSDP.
- CPU + gloo: the engine builds its communication group with a single gloo worker thread, so
  collectives also serialise in issue order, and the k-th collective of a rank is the k-th
  ``gloo:*`` op of that thread in the trace. ``handle.wait()`` blocks the training thread
  until the transfer is done (that blocking is the CPU's "NCCL wait").

gloo's ``reduce_scatter_tensor`` blocks the issuing thread even with ``async_op=True``
(measured here: 47-100 ms of issue time for 32 MB) and is an all-reduce internally, so on
gloo a reduce-scatter is issued as an asynchronous all-reduce of the gradient whose own chunk
the rank keeps: same result, same bytes on the wire as gloo's own implementation.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

_GROUP_IDS = itertools.count()


def new_comm_group(backend: str) -> Any:
    """The engine's communication group over all ranks of the default group.

    gloo: a ``ProcessGroupGloo`` with ONE worker thread, built directly because
    ``dist.new_group`` ignores gloo options (default: two threads, which run two collectives
    at once and out of issue order). Its collectives are called on the backend object.
    """
    if backend != "gloo":
        return dist.new_group(backend=backend)
    # Every rank creates its groups in the same order, so a per-process counter gives each
    # group the same fresh store prefix on every rank (a reused prefix hangs the rendezvous).
    prefix = f"overlapscope-comm-{next(_GROUP_IDS)}"
    store = dist.PrefixStore(prefix, dist.distributed_c10d._get_default_store())
    opts = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
    opts._threads = 1  # one worker thread: collectives run in issue order, like a stream
    ifname = os.environ.get("GLOO_SOCKET_IFNAME")  # the lab pins each rank to its veth
    opts._devices = [
        dist.ProcessGroupGloo.create_device(interface=ifname.split(",")[0])
        if ifname
        else dist.ProcessGroupGloo.create_default_device()
    ]
    return dist.ProcessGroupGloo(store, dist.get_rank(), dist.get_world_size(), opts)


@dataclass(slots=True)
class PendingGrad:
    """A gradient reduction in flight; ``wait()`` returns this rank's reduced chunk."""

    work: dist.Work
    buffer: torch.Tensor  # kept alive until the collective is done
    rank: int
    shard_numel: int
    keeps_chunk: bool  # gloo all-reduce path: the result is a chunk of `buffer`

    def wait(self) -> torch.Tensor:
        self.work.wait()
        if self.keeps_chunk:
            start = self.rank * self.shard_numel
            return self.buffer[start : start + self.shard_numel].clone()
        return self.buffer


class Collectives:
    def __init__(self, group: Any, backend: str) -> None:
        self.group = group
        self.backend = backend
        self.gloo = backend == "gloo"
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()

    def close(self) -> None:
        """Shut the engine's own gloo group down (its worker thread must not outlive the
        process's teardown: left running, it can abort the rank at exit)."""
        if self.gloo:
            self.group.shutdown()

    def all_gather(self, out: torch.Tensor, shard: torch.Tensor) -> dist.Work:
        """Issue: gather every rank's ``shard`` into ``out`` (returns at once)."""
        if self.gloo:
            return self.group._allgather_base(out, shard)
        work = dist.all_gather_single(out, shard, group=self.group, async_op=True)
        assert work is not None
        return work

    def _all_reduce(self, t: torch.Tensor) -> dist.Work:
        if self.gloo:
            return self.group.allreduce([t])
        work = dist.all_reduce(t, group=self.group, async_op=True)
        assert work is not None
        return work

    def reduce_scatter_mean(self, grad: torch.Tensor, shard_numel: int) -> PendingGrad:
        """Issue: average ``grad`` (fp32, full length) over ranks, keep this rank's chunk."""
        grad.div_(self.world_size)
        if self.gloo:
            work = self._all_reduce(grad)
            return PendingGrad(work, grad, self.rank, shard_numel, keeps_chunk=True)
        out = torch.empty(shard_numel, dtype=grad.dtype, device=grad.device)
        work = dist.reduce_scatter_single(out, grad, group=self.group, async_op=True)
        assert work is not None
        # NCCL keeps `grad` alive until the kernel has read it (it records the input).
        return PendingGrad(work, out, self.rank, shard_numel, keeps_chunk=False)

    def all_reduce_mean(self, grad: torch.Tensor) -> PendingGrad:
        """Issue: average ``grad`` over ranks in place (``no_shard``)."""
        grad.div_(self.world_size)
        return PendingGrad(self._all_reduce(grad), grad, 0, grad.numel(), keeps_chunk=False)
