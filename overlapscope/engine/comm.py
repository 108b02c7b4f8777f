"""Asynchronous collectives for the engine, one process group = one ordered queue.

Both backends return work handles and never block the issuing thread; the training thread
waits on a handle only where it needs the data:

- CUDA + NCCL: each collective runs on the process group's own NCCL stream, ordered after
  the work already queued on the issuing (compute) stream. ``handle.wait()`` makes the
  *compute stream* wait on that NCCL stream (a device-side dependency, no CPU sync). All
  collectives of one group serialise on its stream in issue order, as in torch FSDP.
- CPU + gloo: all-gather and reduce-scatter are built from point-to-point sends and
  receives (:mod:`overlapscope.engine.p2p`): posted at issue, moved by gloo's transport in
  posting order per peer connection (so they queue like collectives on one stream), and
  completed in issue order by one waiter thread. ``handle.wait()`` blocks the training
  thread until the transfer is done (that blocking is the CPU's "NCCL wait"). gloo's own
  ``_allgather_base`` reaches only ~0.6 of a shaped 2-rank link, the direct exchange ~0.94;
  gloo's ``reduce_scatter_tensor`` blocks the issuing thread and all-reduces the whole
  buffer, the direct exchange sends each rank only its chunk.
- CUDA + gloo (several ranks sharing one GPU, or a shaped host link between GPUs): the same
  rings, staged through pinned host memory (:mod:`overlapscope.engine.staging`); the
  training thread still never waits on the device.
- ``no_shard`` all-reduces on gloo run on the engine's own gloo group with ONE worker thread
  (so they run in issue order; the k-th is the k-th ``gloo:all_reduce`` op of that thread).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from overlapscope.engine.p2p import LaneWork, P2PLane
from overlapscope.engine.staging import CudaCopier, HostStaging, StagedWork

_GROUP_IDS = itertools.count()

# torch 2.13 names the single-tensor collectives *_single and deprecates *_into_tensor /
# *_tensor; older releases (the CUDA images in use: 2.11) have only the latter.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

Work = dist.Work | LaneWork | StagedWork


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
    """A gradient reduction in flight; ``wait()`` returns this rank's reduced gradient."""

    work: Work
    buffer: torch.Tensor | None  # the result (NCCL, all-reduce, staged); None: the lane's

    def wait(self) -> torch.Tensor:
        self.work.wait()
        if self.buffer is None:
            assert isinstance(self.work, LaneWork) and self.work.result is not None
            return self.work.result
        return self.buffer


class Collectives:
    def __init__(self, group: Any, backend: str, device: torch.device | None = None) -> None:
        self.group = group
        self.backend = backend
        self.gloo = backend == "gloo"
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.lane = P2PLane(group, self.rank, self.world_size) if self.gloo else None
        on_cuda = device is not None and device.type == "cuda"
        self.staging = (
            HostStaging(self.lane, CudaCopier(device))
            if self.lane is not None and on_cuda and device is not None
            else None
        )

    def close(self) -> None:
        """Shut the engine's own gloo group down (its threads must not outlive the
        process's teardown: left running, they can abort the rank at exit)."""
        if self.lane is not None:
            self.lane.close()
        if self.gloo and hasattr(self.group, "shutdown"):  # older torch has no shutdown()
            self.group.shutdown()

    def all_gather(self, out: torch.Tensor, shard: torch.Tensor) -> Work:
        """Issue: gather every rank's ``shard`` into ``out`` (returns at once)."""
        if self.staging is not None:
            return self.staging.all_gather(out, shard)
        if self.lane is not None:
            return self.lane.all_gather(out, shard)
        work = _all_gather_single(out, shard, group=self.group, async_op=True)
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
        if self.staging is not None:
            return PendingGrad(*self.staging.reduce_scatter_sum(grad, shard_numel))
        if self.lane is not None:
            return PendingGrad(self.lane.reduce_scatter_sum(grad), None)
        out = torch.empty(shard_numel, dtype=grad.dtype, device=grad.device)
        work = _reduce_scatter_single(out, grad, group=self.group, async_op=True)
        assert work is not None
        # NCCL keeps `grad` alive until the kernel has read it (it records the input).
        return PendingGrad(work, out)

    def all_reduce_mean(self, grad: torch.Tensor) -> PendingGrad:
        """Issue: average ``grad`` over ranks in place (``no_shard``)."""
        grad.div_(self.world_size)
        return PendingGrad(self._all_reduce(grad), grad)
