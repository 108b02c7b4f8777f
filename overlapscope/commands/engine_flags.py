"""The engine's flags, shared by ``run`` and ``sweep``, and the run configuration they make
(:func:`config_from_args`): each flag is the field of ``config.RunConfig`` (and of the engine,
model and profiler configurations it holds) that it sets, as the field describes it
(``commands/config_flags.py``)."""

from __future__ import annotations

import argparse
import os

from overlapscope.commands.config_flags import add_config_flags, config_from
from overlapscope.config import DEFAULT_LIMIT_WINDOW, RunConfig
from overlapscope.errors import UserError

# ``sweep``'s variant: its ``--policies`` sets policy, rate limiter and forward prefetch per
# point, so --forward-prefetch and --limit-all-gathers apply to its configurations.
SWEEP_CHANGES = {
    "forward_prefetch": {"help": "add +fwd to every configuration"},
    "limit_all_gathers": {
        "help": "window K of a bare +limit in --policies (configurations without +limit run "
        f"without the rate limiter; default: {DEFAULT_LIMIT_WINDOW})",
        "hint": " (configurations without +limit in --policies run without the rate limiter)",
    },
}


def add_engine_flags(p: argparse.ArgumentParser, *, with_policy: bool = True) -> None:
    """The flags of every field of :class:`RunConfig`; ``with_policy=False`` is ``sweep``'s
    variant (no --policy: see :data:`SWEEP_CHANGES`)."""
    if with_policy:
        add_config_flags(p, RunConfig, "training and capture")
    else:
        add_config_flags(
            p, RunConfig, "training and capture", skip={"policy"}, changes=SWEEP_CHANGES
        )


def _backend(asked: str, device: str, nproc: int, lab: bool) -> str:
    """The collective backend: NCCL on CUDA where every rank has a GPU of its own, else gloo
    (on CUDA, staged through pinned host memory; docs/ENGINE.md)."""
    import torch

    gpus = torch.cuda.device_count() if device == "cuda" else 0
    # In the lab every rank is one torchrun node of one process: all ranks share this host.
    shared = device == "cuda" and nproc > gpus
    if asked == "auto":
        return "nccl" if device == "cuda" and not shared else "gloo"
    if asked == "nccl" and device != "cuda":
        raise UserError("--backend nccl needs --device cuda; use --backend gloo on CPU")
    if asked == "nccl" and shared:
        where = "behind the lab's link" if lab else "on this host"
        raise UserError(
            f"--backend nccl: {nproc} ranks {where} but {gpus} GPU(s), and NCCL refuses two "
            "ranks on one GPU; use --backend gloo (staged through host memory) or fewer --nproc"
        )
    return asked


def config_from_args(args: argparse.Namespace, policy: str | None = None) -> RunConfig:
    """The run ``args`` ask for: ``auto`` device, backend and threads resolved here; ``policy``
    (sweep's first point) where the command has no --policy."""
    import torch

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is available here; use --device cpu")
    backend = _backend(args.backend, device, args.nproc, args.link_gbit is not None)
    threads = args.threads_per_rank or max(1, (os.cpu_count() or 1) // max(1, args.nproc))
    given = {"device": device, "backend": backend, "threads_per_rank": threads}
    if policy is not None:
        given["policy"] = policy
    try:
        return config_from(RunConfig, vars(args), **given)
    except ValueError as e:
        raise UserError(str(e)) from None
