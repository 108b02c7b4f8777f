"""The sharded engine: units, their hooks, and the prefetch schedule's execution.

What to issue, prefetch, wait on, free and reduce at each hook is decided by the torch-free
:class:`~overlapscope.engine.schedule.Schedule` (the what-if simulator replays the same one);
this module carries its actions out on tensors (``_execute``).

Timeline of one unit's backward on the compute lane (C) and the communication lane (N),
for units 3 -> 2 in backward order (``AG`` all-gather, ``RS`` reduce-scatter)::

    none           C: ....wait AG3|bwd 3|......wait AG2|bwd 2|
                   N: AG3---------|     RS3----AG2-----|     RS2
    backward_post  C: ....wait AG3|bwd 3|wait AG2|bwd 2|
                   N: AG3---------|     AG2-----RS3    RS2          (AG2 before RS3)
    backward_pre   C: ....wait AG3|bwd 3.........|bwd 2|
                   N: AG3---------AG2----|RS3     RS2                (AG2 under bwd 3)

Memory: ``none`` and ``backward_post`` hold one unit's full parameters during a unit's
backward; ``backward_pre`` holds two (the current one and the prefetched next one).
``forward_prefetch`` issues the next unit's forward all-gather before the current unit's
forward compute (two units alive in forward). The rate limiter (``limit_all_gathers=K``)
holds back a *prefetch* while K units are alive: on CPU the prefetch is issued when the
next unit is freed; on CUDA the CPU also waits for the oldest free to complete on the GPU.

The root unit (parameters outside every named unit: embeddings, head) is gathered at the
start of forward and kept until its gradients are reduced at the end of backward (it is
needed again at once by the loss), as torch FSDP2 does for its root; it is not counted in
the limiter's window.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils._pytree import tree_flatten

from overlapscope.config import EngineConfig, MixedPrecision, Sharding
from overlapscope.engine.comm import Collectives, new_comm_group
from overlapscope.engine.instrument import Instrument
from overlapscope.engine.levers import install_checkpointing, offload_shards
from overlapscope.engine.offload_copies import OffloadCopies
from overlapscope.engine.schedule import Act, Action, Schedule, ScheduleStats
from overlapscope.engine.units import Unit, build_units
from overlapscope.phases import CollectiveKind, Phase
from overlapscope.trace.naming.ranges import OPTIM_UNIT


class ShardedModel(nn.Module):
    """Wrap ``model``; each name in ``units`` (a submodule path) becomes one sharded unit.

    Parameters outside every named unit form the ``root`` unit. After wrapping, the model's
    parameters are the per-rank shards: build the optimizer on ``sharded.parameters()``.
    """

    def __init__(
        self,
        model: nn.Module,
        units: list[str],
        config: EngineConfig | None = None,
        *,
        group: Any = None,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        if not dist.is_initialized():
            raise RuntimeError("initialise torch.distributed before wrapping a model")
        self.config = config or EngineConfig()
        self.module = model
        self.device = device or next(model.parameters()).device
        backend = dist.get_backend()
        self.comm = Collectives(group or new_comm_group(backend), backend, self.device)
        self.instrument = Instrument(self.config.instrument)
        self._compute_dtype = (
            torch.bfloat16 if self.config.mixed_precision is MixedPrecision.BF16 else torch.float32
        )
        rank, world = self.comm.rank, self.comm.world_size
        if self.config.sharding is Sharding.NO_SHARD:
            rank, world = 0, 1  # every rank keeps everything
        self.units = build_units(
            model,
            units,
            rank=rank,
            world_size=world,
            compute_dtype=self._compute_dtype,
            device=self.device,
        )
        self._shards = nn.ParameterList(u.flat.shard for u in self.units if u.flat is not None)
        self._by_name = {u.name: u for u in self.units}
        # the prefetch schedule (engine/schedule.py); it records the forward order in the
        # first forward (static graph)
        self.schedule = Schedule(
            policy=self.config.policy,
            forward_prefetch=self.config.forward_prefetch,
            limit_all_gathers=self.config.limit_all_gathers,
            sharding=self.config.sharding,
            empty=frozenset(u.name for u in self.units if u.flat is None),
        )
        self._free_events: collections.deque[torch.cuda.Event] = collections.deque()
        # CPU offload: the copies around each collective (engine/offload_copies.py)
        self._offload = (
            OffloadCopies(self.device, self.instrument) if self.config.cpu_offload else None
        )
        if self.config.cpu_offload and self.device.type == "cuda":
            offload_shards(self.units)
        self._install_hooks()

    # ------------------------------------------------------------------ construction
    def _install_hooks(self) -> None:
        non_root = [u for u in self.units if not u.is_root]
        for i, u in enumerate(non_root):
            if self.config.checkpoints(i):
                install_checkpointing(u, self.instrument, lambda: self.schedule.in_backward)
        for u in self.units:
            u.module.register_forward_pre_hook(self._make_pre_forward(u))
            u.module.register_forward_hook(self._make_post_forward(u))
            if u.flat is not None:
                u.flat.full.register_post_accumulate_grad_hook(self._make_post_backward(u))

    # ------------------------------------------------------------------ public
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    @property
    def root(self) -> Unit:
        return self.units[0]

    def close(self) -> None:
        """Release the communication group (call before ``destroy_process_group``)."""
        self.comm.close()

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        with self.instrument.phase(Phase.OPTIM, OPTIM_UNIT):
            optimizer.step()

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Unsharded fp32 parameters ``{fqn: tensor}`` (a blocking collective; not for hot paths)."""
        out: dict[str, torch.Tensor] = {}
        for u in self.units:
            if u.flat is None:
                continue
            flat = u.flat
            full = torch.empty(flat.padded_numel, dtype=torch.float32, device=self.device)
            # on the device, also where --cpu-offload keeps the shard in host memory (NCCL
            # gathers device memory only: "Tensors must be CUDA and dense")
            shard = flat.shard.detach().to(self.device)
            if self.config.sharding is Sharding.NO_SHARD:
                full.copy_(shard)
            else:
                self.comm.all_gather(full, shard).wait()
            out.update(flat.unflatten(full))
        return out

    def unit_sizes(self) -> list[dict[str, int | str]]:
        return [
            {
                "name": u.name,
                "numel": u.flat.numel,
                "full_bytes": u.flat.full_bytes,
                "shard_bytes": u.flat.shard_bytes,
            }
            for u in self.forward_order()
            if u.flat is not None
        ]

    def forward_order(self) -> list[Unit]:
        if not self.schedule.frozen:
            return self.units
        return [self._by_name[n] for n in self.schedule.order]

    @property
    def stats(self) -> ScheduleStats:
        """Alive-unit and deferred-prefetch counters (run.json)."""
        return self.schedule.stats

    # ------------------------------------------------------------------ executing the schedule
    def _execute(self, actions: list[Action], grad: torch.Tensor | None = None) -> None:
        """Carry out the schedule's actions (engine/schedule.py) in order, on tensors."""
        for a in actions:
            u = self._by_name[a.unit]
            match a.act:
                case Act.ISSUE:
                    self._ensure_gathered(u, a.phase)  # ISSUE on demand
                case Act.PREFETCH:
                    limit = self.config.limit_all_gathers
                    if limit is not None and not u.is_root:
                        self._throttle_on_device_frees(u, limit)
                    self._issue_all_gather(u, a.phase)  # PREFETCH (async)
                case Act.WAIT:
                    self._wait_all_gather(u)  # WAIT all-gather
                case Act.FREE:
                    self._free(u)  # reshard
                case Act.REDUCE:
                    assert grad is not None
                    self._reduce(u, a.phase, grad)  # ISSUE reduce-scatter / all-reduce
                case Act.WAIT_REDUCE:
                    self._wait_reduce(u)  # WAIT reduction before the optimizer
                case _:
                    raise ValueError(f"unhandled action {a.act!r}")

    def _issue_all_gather(self, u: Unit, phase: Phase) -> None:
        """Issue ``u``'s all-gather into its (re-grown) full buffer; returns at once."""
        flat = u.flat
        assert flat is not None
        out = flat.alloc_full()
        src = flat.shard.detach()
        if self._offload is not None:
            src = self._offload.to_device(u.name, src)
        with self.instrument.phase(phase, u.name):
            if src.dtype != self._compute_dtype:
                src = src.to(self._compute_dtype)  # bf16: gather half the bytes
            u.ag_src = src
            u.ag_work = self.comm.all_gather(out, src)  # ISSUE all-gather (async)
            u.ag_phase = phase

    def _ensure_gathered(self, u: Unit, phase: Phase) -> None:
        """On-demand gather (never held back by the limiter: the data is needed now)."""
        assert u.flat is not None
        if self.config.sharding is Sharding.NO_SHARD:
            # local copy of the updated parameters, no communication (once per step)
            src = u.flat.shard.detach()
            if self._offload is not None:
                src = self._offload.to_device(u.name, src)
            with torch.no_grad():
                u.flat.alloc_full().copy_(src)
            return
        self._issue_all_gather(u, phase)

    def _wait_all_gather(self, u: Unit) -> None:
        if u.ag_work is None:
            return
        assert u.ag_phase is not None
        with self.instrument.phase(u.ag_phase.wait, u.name):
            u.ag_work.wait()  # WAIT all-gather (CPU: blocks; CUDA: compute stream waits)
        u.ag_work = None
        u.ag_src = None

    def _throttle_on_device_frees(self, u: Unit, limit: int) -> None:
        """CUDA only: the CPU may have freed units whose last kernels still run."""
        while self._free_events and self._free_events[0].query():
            self._free_events.popleft()
        alive = sum(
            1
            for x in self.units
            if not x.is_root
            and x.flat is not None
            and (x.ag_work is not None or x.flat.is_gathered)
        )
        if self._free_events and alive + len(self._free_events) >= limit:
            with self.instrument.phase(Phase.LIMITER, u.name):
                # Deliberate CPU-GPU sync: the rate limiter blocks the issuing thread until
                # the oldest freed unit's memory is really free on the device.
                self._free_events.popleft().synchronize()

    def _free(self, u: Unit) -> None:
        """Reshard: drop ``u``'s full parameters (the schedule releases a held-back prefetch
        as its next action)."""
        assert u.flat is not None
        if u.flat.full.is_cuda:
            ev = torch.cuda.Event()
            ev.record()  # marks the last use of the freed memory on the compute stream
            self._free_events.append(ev)
        u.flat.free_full()

    # ------------------------------------------------------------------ hooks: forward
    def _make_pre_forward(self, u: Unit) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            if u.is_root:
                for x in self.units:
                    x.bwd_started = False
            self.instrument.pause()
            # ISSUE on demand · PREFETCH next (forward prefetch) · WAIT this unit
            self._execute(self.schedule.pre_forward(u.name))
            if u.flat is not None:
                u.flat.bind_views()
            self.instrument.push(Phase.FWD, u.name)

        return hook

    def _make_post_forward(self, u: Unit) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            self.instrument.pop(Phase.FWD, u.name)
            self._execute(self.schedule.post_forward(u.name))  # FREE (reshard after forward)
            if torch.is_grad_enabled():
                self._register_pre_backward(u, output)
            self.instrument.resume()

        return hook

    # ------------------------------------------------------------------ hooks: backward
    def _register_pre_backward(self, u: Unit, output: Any) -> None:
        tensors = [t for t in tree_flatten(output)[0] if torch.is_tensor(t) and t.requires_grad]

        def hook(grad: torch.Tensor) -> None:
            if not u.bwd_started:
                u.bwd_started = True
                self._pre_backward(u)

        for t in tensors:
            t.register_hook(hook)

    def _pre_backward(self, u: Unit) -> None:
        self.instrument.pause()
        if u.is_root:
            # Runs once when the whole backward pass is done: wait for the gradient
            # reductions so the optimizer sees reduced shards.
            torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
        # ISSUE on demand · PREFETCH next (backward_pre) · WAIT: gradient compute needs it
        self._execute(self.schedule.pre_backward(u.name))
        self.instrument.push(Phase.BWD, u.name)

    def _make_post_backward(self, u: Unit) -> Callable[[torch.Tensor], None]:
        def hook(full: torch.Tensor) -> None:
            self.instrument.pop(Phase.BWD, u.name)
            assert full.grad is not None
            grad = full.grad
            full.grad = None
            grad32 = grad.float() if grad.dtype != torch.float32 else grad  # fp32 reduction
            # FREE (reshard after backward) · PREFETCH next (backward_post) · REDUCE
            self._execute(self.schedule.post_backward(u.name), grad32)
            self.instrument.resume()

        return hook

    def _reduce(self, u: Unit, phase: Phase, grad32: torch.Tensor) -> None:
        flat = u.flat
        assert flat is not None
        with self.instrument.phase(phase, u.name):
            match phase.collective_kind:  # the phase table says which collective it runs
                case CollectiveKind.ALL_REDUCE:
                    u.pending_grad = self.comm.all_reduce_mean(grad32)  # ISSUE all-reduce
                case CollectiveKind.REDUCE_SCATTER:
                    # ISSUE reduce-scatter (async)
                    u.pending_grad = self.comm.reduce_scatter_mean(grad32, flat.shard_numel)
                case other:
                    raise ValueError(f"phase {phase.value!r} reduces no gradient ({other})")
        u.grad_phase = phase

    def _wait_reduce(self, u: Unit) -> None:
        if u.pending_grad is None or u.flat is None:
            return
        assert u.grad_phase is not None
        with self.instrument.phase(u.grad_phase.wait, u.name):
            reduced = u.pending_grad.wait()  # WAIT reduce-scatter before the optimizer
        u.pending_grad = None
        if self._offload is not None:
            reduced = self._offload.to_host(u.name, reduced)
        u.flat.shard.grad = reduced

    def _finish_backward(self) -> None:
        self.instrument.close_all()
        # WAIT every reduction in issue order · WAIT + FREE units this backward never used
        self._execute(self.schedule.finish_backward())
        if self._offload is not None:
            self._offload.wait_to_host()  # (the one CPU-GPU sync of CPU offload per step)
