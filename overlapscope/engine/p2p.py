"""gloo all-gather and reduce-scatter as rings of point-to-point sends and receives.

Why: over a shaped 2-rank lab link, gloo's own ``_allgather_base`` reaches only 54-65% of the
link rate, while the same exchange with ``send``/``recv`` on the same process group reaches
94% (the frame-overhead ceiling), at 0.2 and 1 Gbit/s (docs/LAB.md). gloo's reduce-scatter
is an all-reduce of the whole buffer (twice the bytes); the ring sends each chunk once. On 4
ranks, rounds run one after the other (78-80% of the link when every rank sends to every
peer at once, 94% as a ring). Each rank sends and receives ``(n - 1) / n`` of the buffer.

How a collective runs:

- **issue** (the training thread, returns at once): post round 0, a receive from the left
  neighbour and a send to the right one, on the engine's gloo group. gloo's transport moves
  them in the background, in posting order per peer connection: a collective issued while
  another is in flight queues behind it on the link, like collectives on one NCCL stream.
- **completion** (:class:`P2PLane`'s one waiter thread, collectives in issue order): wait
  for round 0's receive; run rounds 1..n-2 (each posted when the previous one's data is
  in; a reduce-scatter adds the received partial sums here, as NCCL's kernel does on its
  stream); wait for round 0's send; release the handle's ``wait()``.

Profiling: gloo records round 0's send and receive as ``gloo:send`` / ``gloo:recv`` events
on the *issuing* thread (with their shapes in ``Input Dims``), from the issue (inside the
engine's issue range) to the moment the waiter thread waited on them. The send is waited
last, so its event ends when the whole collective is done; the analysis folds the two into
one transfer (``overlapscope/trace/recognize/p2p.py``). Later rounds are posted by the waiter
thread,
which the profiler does not record (its recording is per thread).

Staged (device) tensors: where the buffers are pinned host memory that a device copy is
still filling (``overlapscope/engine/staging.py``), a collective is issued with ``ready``:
round 0's receives are posted at issue as usual, but its sends are posted by the waiter
thread once ``ready()`` returns (the copy is done), so the issuing thread never waits on the
device. Their ``gloo:send`` events are then not in the trace (the waiter thread is not
profiled); the receives still span each collective.

Tags: every collective takes the next value of a per-lane counter as its gloo tag. All ranks
issue the same collectives in the same order, so the counters agree and a receive can only
match a send of its own collective (on more than 2 ranks, a later collective's round 0 can
pass an earlier one's later rounds on a link).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

_TAG_MODULUS = 1 << 30  # gloo tags are 64-bit; stay well inside int32 for safety
# Reduce-scatter rounds move in pieces this large, so adding one piece overlaps receiving the
# next (2 ranks, 1 Gbit/s, 64 MB: 81% of the link in one piece).
REDUCE_PIECE_BYTES = 2 << 20


@dataclass(slots=True)
class LaneWork:
    """Handle of one collective in flight; ``wait()`` blocks until it is done."""

    description: str
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    result: torch.Tensor | None = None  # reduce-scatter: the rank's reduced chunk
    # Every tensor the collective touches. The waiter thread drops its own references before
    # ``done`` is set, so these are freed on the training thread with the handle: the
    # profiler's memory accounting is per thread, and a free on the unprofiled waiter
    # thread would never be subtracted.
    keep: tuple[torch.Tensor, ...] = ()

    def wait(self) -> bool:
        self.done.wait()
        if self.error is not None:
            raise RuntimeError(f"{self.description} failed: {self.error}") from self.error
        return True


@dataclass(slots=True)
class _Job:
    run_rounds: Callable[[], None]  # waits for round 0's receives, runs rounds 1..n-2
    # posts (staged) or returns (posted at issue) round 0's sends; waited last (module doc)
    first_sends: Callable[[], list[Any]]
    finish: Callable[[], torch.Tensor | None]
    handle: LaneWork


_STOP = None


def _pieces(numel: int, piece_numel: int) -> list[slice]:
    return [slice(i, min(i + piece_numel, numel)) for i in range(0, numel, piece_numel)] or [
        slice(0, 0)
    ]


class P2PLane:
    """All-gather and reduce-scatter on a gloo group as rings, completed in issue order."""

    def __init__(self, group: Any, rank: int, world_size: int) -> None:
        self.group = group
        self.rank = rank
        self.world_size = world_size
        self.right = (rank + 1) % world_size
        self.left = (rank - 1) % world_size
        self._seq = 0
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._complete, name="ovs-comm-wait", daemon=True)
        self._thread.start()

    # -- issue (training thread) -------------------------------------------------------------

    def _next_tag(self) -> int:
        tag = self._seq % _TAG_MODULUS
        self._seq += 1
        return tag

    def _sends(self, send: torch.Tensor, tag: int, pieces: list[slice]) -> list[Any]:
        return [self.group.send([send[p]], self.right, tag) for p in pieces]

    def _round(
        self, send: torch.Tensor, recv: torch.Tensor, tag: int, pieces: list[slice]
    ) -> tuple[list[Any], list[Any]]:
        """One ring round in ``pieces``: receive from the left neighbour, send to the right."""
        recvs = [self.group.recv([recv[p]], self.left, tag) for p in pieces]
        return recvs, self._sends(send, tag, pieces)

    def _first_round(
        self,
        send: torch.Tensor,
        recv: torch.Tensor,
        tag: int,
        pieces: list[slice],
        ready: Callable[[], None] | None,
    ) -> tuple[list[Any], Callable[[], list[Any]]]:
        """Round 0, posted at issue; with ``ready`` (staged buffers) only its receives are,
        and the waiter thread posts its sends once ``ready()`` returns."""
        if ready is None:
            recvs, sends = self._round(send, recv, tag, pieces)
            return recvs, lambda: sends
        recvs = [self.group.recv([recv[p]], self.left, tag) for p in pieces]

        def post_sends() -> list[Any]:
            ready()  # waiter thread: the device copy into `send` is complete
            return self._sends(send, tag, pieces)

        return recvs, post_sends

    def _submit(
        self,
        run_rounds: Callable[[], None],
        first_sends: Callable[[], list[Any]],
        finish: Callable[[], torch.Tensor | None],
        what: str,
        keep: tuple[torch.Tensor, ...],
    ) -> LaneWork:
        handle = LaneWork(what, keep=keep)
        if self._failed is not None:  # an earlier collective failed: the lane is unusable
            handle.error = self._failed
            handle.done.set()
            return handle
        self._jobs.put(_Job(run_rounds, first_sends, finish, handle))
        return handle

    @staticmethod
    def completed(result: torch.Tensor | None, what: str) -> LaneWork:
        """A collective with nothing to move (one rank): already done."""
        handle = LaneWork(what, result=result)
        handle.done.set()
        return handle

    def all_gather(
        self,
        out: torch.Tensor,
        shard: torch.Tensor | None,
        ready: Callable[[], None] | None = None,
    ) -> LaneWork:
        """Gather every rank's ``shard`` into ``out`` (rank-major); returns at once.

        ``shard=None``: this rank's block of ``out`` is already in place, or will be once
        ``ready()`` returns (staged buffers; module doc).

        Ring: in round ``s`` a rank sends block ``rank - s`` to its right neighbour and
        receives block ``rank - s - 1`` from its left one (mod n)."""
        n, r = self.world_size, self.rank
        blocks = out.view(n, -1)
        if shard is not None:
            if blocks.shape[1] != shard.numel():
                raise ValueError(
                    f"all-gather output of {out.numel()} elements is not {n} x {shard.numel()}"
                )
            blocks[r].copy_(shard.view(-1))
        tag = self._next_tag()
        whole = [slice(None)]
        if n == 1:
            return self.completed(None, "all-gather")
        first_recvs, first_sends = self._first_round(
            blocks[r], blocks[(r - 1) % n], tag, whole, ready
        )

        def run_rounds() -> None:
            for w in first_recvs:
                w.wait()
            for s in range(1, n - 1):
                recvs, sends = self._round(blocks[(r - s) % n], blocks[(r - s - 1) % n], tag, whole)
                for w in recvs + sends:
                    w.wait()

        keep = (out,) if shard is None else (out, shard)
        return self._submit(run_rounds, first_sends, lambda: None, f"all-gather (tag {tag})", keep)

    def reduce_scatter_sum(
        self, full: torch.Tensor, ready: Callable[[], None] | None = None
    ) -> LaneWork:
        """Sum ``full`` over ranks; ``handle.result`` is this rank's reduced chunk (a buffer of
        its own; with one rank, ``full`` itself).

        Ring: in round ``s`` a rank sends its partial sum of chunk ``rank - s - 1`` to the
        right and adds the left neighbour's partial sum of chunk ``rank - s - 2`` into its
        own, in place in ``full`` (each chunk is added to once and sent on the next round;
        chunk ``rank - 1``, sent first, is never written). After ``n - 1`` rounds chunk
        ``rank`` holds the sum over all ranks; its last addition goes into the receive buffer,
        which is returned. Each round moves in pieces of
        ``REDUCE_PIECE_BYTES`` so that adding a piece overlaps receiving the next.
        With ``ready``, ``full`` is filled by a copy that is complete once ``ready()``
        returns (staged buffers; module doc); the result is then pinned like ``full``."""
        n, r = self.world_size, self.rank
        chunks = full.view(n, -1)
        tag = self._next_tag()
        if n == 1:
            return self.completed(chunks[r], "reduce-scatter")
        # pinned like `full`: a staged result is copied to the device without blocking
        incoming = torch.empty(chunks[r].shape, dtype=full.dtype, pin_memory=full.is_pinned())
        pieces = _pieces(incoming.numel(), max(1, REDUCE_PIECE_BYTES // incoming.element_size()))
        first_recvs, first_sends = self._first_round(
            chunks[(r - 1) % n], incoming, tag, pieces, ready
        )

        def add_in(recvs: list[Any], chunk: int) -> None:
            """The reduction, on the lane's thread: add the received partial sum into the
            rank's chunk, or, in the last round (chunk ``rank``), the chunk into the received
            buffer, which becomes the result (no extra copy of the shard)."""
            for w, p in zip(recvs, pieces, strict=True):
                w.wait()
                if chunk == r:
                    incoming[p].add_(chunks[r][p])
                else:
                    chunks[chunk][p].add_(incoming[p])

        def run_rounds() -> None:
            add_in(first_recvs, (r - 2) % n)
            for s in range(1, n - 1):
                recvs, sends = self._round(chunks[(r - s - 1) % n], incoming, tag, pieces)
                add_in(recvs, (r - s - 2) % n)
                for w in sends:
                    w.wait()

        return self._submit(
            run_rounds,
            first_sends,
            lambda: incoming,
            f"reduce-scatter (tag {tag})",
            (full, incoming),
        )

    # -- completion (waiter thread) ----------------------------------------------------------

    @staticmethod
    def _run(job: _Job) -> torch.Tensor | None:
        """One collective's completion. A function of its own so that its locals (gloo work
        handles, which hold the tensors) are gone when it returns."""
        first_sends = job.first_sends()  # staged: posted here, once the data is on the host
        job.run_rounds()
        for w in first_sends:  # last: their events then span the collective
            w.wait()
        return job.finish()

    def _complete(self) -> None:
        while (job := self._jobs.get()) is not _STOP:
            handle = job.handle
            done = handle.done
            try:
                if self._failed is not None:
                    raise self._failed
                handle.result = self._run(job)
            except BaseException as e:
                self._failed = self._failed or e
                handle.error = e
            # Drop every reference this thread holds before the training thread can go on
            # (see LaneWork.keep); afterwards only the Event is touched.
            del job, handle
            done.set()

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the waiter thread after the collectives already issued have completed."""
        self._jobs.put(_STOP)
        self._thread.join(timeout_s)
