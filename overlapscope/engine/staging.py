"""Device tensors over a host transport: gloo collectives staged through pinned host memory.

NCCL refuses two ranks on one GPU, and a slow link between GPUs is easiest to build from
host sockets (the lab's shaped veth). So a CUDA run on gloo moves each collective through
pinned host memory, with the ring of :mod:`overlapscope.engine.p2p`::

    issue (training thread)   D2H copy on the staging stream, ordered after the work already
                              queued on the compute stream; round 0's receives posted
    lane thread               waits for the D2H copy (an event: the training thread never
                              waits on the device), posts round 0's sends, runs the ring
    wait (training thread)    blocks until the ring is done (as the CPU engine does), then
                              queues the H2D copy of the result on the compute stream

So on the GPU a staged all-gather shows as a ``Memcpy DtoH`` on the staging stream at issue
and a ``Memcpy HtoD`` on the compute stream at its wait; the transfer itself is host work
(the ``gloo:recv`` events of round 0 on the issuing thread). What the D2H copy waits for is
only what was queued before the issue, so a prefetch issued before a unit's backward
(``backward_pre``) moves while that backward computes.

The device side is a :class:`Copier` so the orchestration can be tested on the CPU with a
copier whose copies land late (``tests/engine/test_staging.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from overlapscope.engine.p2p import LaneWork, P2PLane


class Copier(Protocol):
    def host_buffer(self, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        """A host buffer the device can copy into and out of without blocking (pinned)."""
        ...

    def to_host(self, src: torch.Tensor, dst: torch.Tensor) -> Callable[[], None]:
        """Start copying device ``src`` into host ``dst``; the returned function blocks until
        the copy is complete (called on the lane's thread, never the training thread)."""
        ...

    def to_device(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Queue the copy of host ``src`` into device ``dst`` after the current work."""
        ...


class CudaCopier:
    """Copies on a staging stream (D2H) and the current stream (H2D), from pinned memory."""

    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.Stream(device=device)

    def host_buffer(self, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, pin_memory=True)

    def to_host(self, src: torch.Tensor, dst: torch.Tensor) -> Callable[[], None]:
        # ordered after everything the compute stream has queued so far (src is written there)
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            dst.copy_(src, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
        src.record_stream(self.stream)  # src may be freed on the compute stream meanwhile
        # The lane thread blocks on this event, so the training thread never synchronises.
        return done.synchronize

    def to_device(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        # Pinned source: asynchronous for the host; the caching host allocator keeps `src`
        # from being reused until the copy has run.
        dst.copy_(src, non_blocking=True)


@dataclass(slots=True)
class StagedWork:
    """A staged collective in flight; ``wait()`` completes it and queues the copy back."""

    work: LaneWork
    finish: Callable[[], None]

    def wait(self) -> bool:
        self.work.wait()  # CPU blocks until the ring is done (the host transport's wait)
        self.finish()  # H2D, queued on the compute stream
        return True


class HostStaging:
    """All-gather and reduce-scatter of device tensors on a :class:`P2PLane`."""

    def __init__(self, lane: P2PLane, copier: Copier) -> None:
        self.lane = lane
        self.copier = copier

    def all_gather(self, out: torch.Tensor, shard: torch.Tensor) -> StagedWork:
        """Gather every rank's ``shard`` (device) into ``out`` (device); returns at once."""
        n, r = self.lane.world_size, self.lane.rank
        if out.numel() != n * shard.numel():
            raise ValueError(f"all-gather output of {out.numel()} elements is not {n} x shard")
        if n == 1:  # nothing to move: a device copy, no host round trip
            out.view(-1).copy_(shard.reshape(-1))
            return StagedWork(P2PLane.completed(None, "all-gather"), lambda: None)
        host = self.copier.host_buffer(out.shape, out.dtype)
        ready = self.copier.to_host(shard.reshape(-1), host.view(n, -1)[r])
        work = self.lane.all_gather(host, None, ready=ready)
        return StagedWork(work, lambda: self.copier.to_device(host, out))

    def reduce_scatter_sum(self, full: torch.Tensor, shard_numel: int) -> tuple[
        StagedWork, torch.Tensor
    ]:  # fmt: skip
        """Sum ``full`` (device) over ranks; returns the work and this rank's chunk (device),
        valid once the work is waited for."""
        if self.lane.world_size == 1:  # nothing to move: the sum is `full` itself
            return StagedWork(P2PLane.completed(full, "reduce-scatter"), lambda: None), full
        host = self.copier.host_buffer(full.shape, full.dtype)
        ready = self.copier.to_host(full, host)
        work = self.lane.reduce_scatter_sum(host, ready=ready)
        out = torch.empty(shard_numel, dtype=full.dtype, device=full.device)

        def finish() -> None:
            assert work.result is not None
            self.copier.to_device(work.result, out)

        return StagedWork(work, finish), out
