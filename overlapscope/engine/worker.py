"""One rank of ``overlapscope run`` (started by torchrun): train, profile, write outputs.

Usage (what the launcher runs, also usable under a multi-node ``torchrun``)::

    torchrun ... -m overlapscope.engine.worker RUN_DIR

``RUN_DIR/config.json`` holds the :class:`RunConfig`. Outputs in ``RUN_DIR``: the rank's
trace, ``logs/rank-<K>.log`` (everything the rank printed), ``logs/rank-<K>.error`` (one line)
if it failed, and, from rank 0 once every rank is done, ``run.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import traceback
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from overlapscope.config import RunConfig
from overlapscope.engine.sharded import ShardedModel
from overlapscope.engine.workloads import build_model, global_batch, local_rows
from overlapscope.flight import capture as flight
from overlapscope.manifest import SCHEMA_VERSION, RunManifest, UnitSize, write_manifest
from overlapscope.trace.capture import RankProfiler, trace_name, versions
from overlapscope.trace.naming.files import RUN_ID_ENV
from overlapscope.trace.read.header import RUN_ID_RE

FAIL_ENV = "OVERLAPSCOPE_FAIL_AT"  # "RANK:STEP": raise at that step (tests of failure paths)
# "warn" or "error": on CUDA, torch flags every CPU-GPU synchronisation in forward and backward
# (the communication path) from the second step on (scripts/gpu-check-engine.sh)
SYNC_DEBUG_ENV = "OVERLAPSCOPE_SYNC_DEBUG"


def _redirect_output(run_dir: Path, rank: int) -> None:
    """Send this rank's stderr (and stdout except rank 0's progress) to its log file."""
    log = (run_dir / "logs" / f"rank-{rank}.log").open("ab", buffering=0)
    os.dup2(log.fileno(), 2)
    if rank != 0:
        os.dup2(log.fileno(), 1)


def _maybe_fail(rank: int, step: int) -> None:
    spec = os.environ.get(FAIL_ENV)
    if spec and spec == f"{rank}:{step}":
        raise RuntimeError(f"injected failure at step {step} ({FAIL_ENV}={spec})")


@contextlib.contextmanager
def _sync_debug(on: bool) -> Iterator[None]:
    mode = os.environ.get(SYNC_DEBUG_ENV)
    if not on or mode not in ("warn", "error"):
        yield
        return
    torch.cuda.set_sync_debug_mode(mode)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def rank_device(kind: str) -> torch.device:
    """This rank's device: on CUDA the local rank's GPU, shared round-robin when a node runs
    more ranks than it has GPUs (possible on gloo only: NCCL refuses two ranks on one GPU)."""
    if kind != "cuda":
        return torch.device("cpu")
    index = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def train(cfg: RunConfig, run_dir: Path) -> None:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if world != cfg.nproc:
        raise RuntimeError(f"torchrun started {world} ranks but the config asks for {cfg.nproc}")
    torch.set_num_threads(cfg.threads_per_rank)
    device = rank_device(cfg.device)
    flight.enable(cfg.flight_recorder)  # (read when the process group is made)
    dist.init_process_group(cfg.backend)

    model, units = build_model(cfg.model, cfg.seed)
    sharded = ShardedModel(model.to(device), units, cfg.engine, device=device)
    run_id = os.environ.get(RUN_ID_ENV)  # the launcher's (engine/launch.py)
    if run_id is not None and not RUN_ID_RE.match(run_id):
        raise RuntimeError(f"{RUN_ID_ENV}={run_id[:40]!r}: not a run id (8-64 hex digits)")
    with RankProfiler(run_dir, rank, cfg.window, device.type == "cuda", run_id) as prof:
        losses, step_us = _train_steps(cfg, sharded, device, prof, rank, world)
    _finish(cfg, run_dir, sharded, losses, step_us, prof.peak_mem_bytes, run_id)
    dist.barrier()
    if cfg.flight_recorder is not None:
        flight.write_dump(run_dir, rank)  # every collective of the run is in it by now
    dist.destroy_process_group()


def _train_steps(
    cfg: RunConfig, sharded: ShardedModel, device: torch.device, prof: RankProfiler,
    rank: int, world: int,
) -> tuple[list[torch.Tensor], list[float]]:  # fmt: skip
    """Run every step (the profiler records its window); (losses, wall time per step in µs)."""
    optimizer = torch.optim.AdamW(sharded.parameters(), lr=cfg.lr)
    # The progress line's loss, copied to (pinned) host memory by the stream itself: reading
    # it after the step's synchronisation needs no device sync of its own (a `.item()` here
    # put a blocking 4-byte copy at the start of every profiled step on the GPU).
    loss_host = torch.empty((), dtype=torch.float32, pin_memory=device.type == "cuda")
    active = set(cfg.window.active_steps())
    cuda = device.type == "cuda"
    losses: list[torch.Tensor] = []
    step_us: list[float] = []
    for step in range(cfg.steps):
        _maybe_fail(rank, step)
        t0 = time.perf_counter()
        x, y = global_batch(cfg.model, cfg.global_batch, step, cfg.seed)
        x, y = local_rows(x, rank, world).to(device), local_rows(y, rank, world).to(device)
        with _sync_debug(cuda and step > 0):
            loss = sharded(x, y)
            loss.backward()  # reductions are waited for at the end of backward
        sharded.optimizer_step(optimizer)
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        loss_host.copy_(loss.detach(), non_blocking=True)
        if cuda:
            # Deliberate CPU-GPU sync at the step boundary (outside the communication
            # path) so the step's wall time is the device's, not the CPU's issue time.
            torch.cuda.synchronize()
        step_us.append((time.perf_counter() - t0) * 1e6)
        prof.step()
        if rank == 0:
            tag = " [profiled]" if step in active else ""
            print(
                f"step {step + 1}/{cfg.steps}  loss {float(loss_host):.4f}  "
                f"{step_us[-1] / 1e3:8.1f} ms{tag}",
                flush=True,
            )
    return losses, step_us


def _finish(
    cfg: RunConfig, run_dir: Path, sharded: ShardedModel, losses: list[torch.Tensor],
    step_us: list[float], profiled_peak_bytes: int, run_id: str | None,
) -> None:  # fmt: skip
    """After the profiled window: gather what run.json needs (blocking, deliberately) and,
    on rank 0, write it."""
    world = dist.get_world_size()
    loss_t = torch.stack(losses)
    if cfg.backend == "gloo":
        loss_t = loss_t.cpu()  # gloo moves host memory (a sync, after the profiled window)
    dist.all_reduce(loss_t)
    loss_t /= world
    cuda = cfg.device == "cuda"
    # CUDA allocator peak / profiler memory events
    peak = torch.cuda.max_memory_allocated() if cuda else profiled_peak_bytes
    mine = (
        tuple(step_us),
        int(peak),
        sharded.stats.max_alive_units,
        sharded.stats.max_alive_in_backward,
        sharded.stats.deferred_prefetches,
        # one per rank: ranks of one host read one clock (analysis/clocks/alignment.py::shared_host)
        socket.gethostname(),
    )
    per_rank: list[Any] = [None] * world
    dist.all_gather_object(per_rank, mine)
    if dist.get_rank() != 0:
        return
    write_manifest(run_dir, _manifest(cfg, sharded, loss_t, per_rank, run_id))


def _manifest(
    cfg: RunConfig, sharded: ShardedModel, loss_t: torch.Tensor, per_rank: list[Any],
    run_id: str | None,
) -> RunManifest:  # fmt: skip
    """run.json's record from the configuration, rank 0's model and every rank's figures
    (``_finish`` gathered them: step times, peak memory, alive units, host)."""
    world = len(per_rank)
    step_time, peaks, alive, alive_bwd, deferred, hosts = zip(*per_rank, strict=True)
    return RunManifest(
        schema_version=SCHEMA_VERSION,
        tool="overlapscope",
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        host=socket.gethostname(),
        config=cfg,
        engine=cfg.engine,
        link_gbit=cfg.link_gbit,
        world_size=world,
        backend=cfg.backend,
        device=cfg.device,
        versions=versions(),
        units=tuple(UnitSize(**u) for u in sharded.unit_sizes()),  # type: ignore[arg-type]
        losses=tuple(float(v) for v in loss_t.cpu()),
        profiled_steps=tuple(cfg.window.active_steps()),
        traces=tuple(trace_name(r) for r in range(world)),
        step_time_us=step_time,
        peak_mem_bytes=peaks,
        max_alive_units=alive,
        max_alive_in_backward=alive_bwd,
        deferred_prefetches=deferred,
        hosts=hosts,
        run_id=run_id,
        trace_stamps=() if run_id is None else tuple((run_id, r) for r in range(world)),
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m overlapscope.engine.worker RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(argv[0])
    rank = int(os.environ.get("RANK", "0"))
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    _redirect_output(run_dir, rank)
    try:
        cfg = RunConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
        train(cfg, run_dir)
    except BaseException as e:
        traceback.print_exc()
        msg = f"{type(e).__name__}: {e}".splitlines()[0] if str(e) else type(e).__name__
        (run_dir / "logs" / f"rank-{rank}.error").write_text(msg + "\n")
        return 1
    # Everything is written (atomically) and every rank has passed the final barrier. Leave
    # without running C++ static destructors: gloo and profiler threads torn down at
    # interpreter exit intermittently aborted a finished rank ("terminate called without an
    # active exception"), which would discard a complete run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
