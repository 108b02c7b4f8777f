"""The engine's flags, shared by ``run``, ``sweep`` and ``whatif``, and the run configuration
they make (:func:`config_from_args`)."""

from __future__ import annotations

import argparse
import os

from overlapscope.commands.flags import MAX_RANKS, MAX_WIDTH, int_at_least, positive_float
from overlapscope.config import (
    DEFAULT_LIMIT_WINDOW,
    EngineConfig,
    MixedPrecision,
    ModelConfig,
    ModelKind,
    Policy,
    ProfileWindow,
    RunConfig,
    Sharding,
    check_checkpoint_units,
)
from overlapscope.errors import UserError


def _values(e: type) -> list[str]:
    return [m.value for m in e]  # type: ignore[attr-defined]


def checkpoint_units(text: str) -> str:
    try:
        return check_checkpoint_units(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_limit_flag(
    p: argparse.ArgumentParser | argparse._ArgumentGroup,
    help: str | None = None,
    off: str = "leave the flag out to turn the rate limiter off",
) -> None:
    """``--limit-all-gathers [K]``, shared by every command that sets the rate limiter;
    ``help`` replaces its help text, ``off`` says (in the error for K < 1) how to turn it off."""
    p.add_argument(
        "--limit-all-gathers",
        type=int_at_least(1, f" ({off})"),
        nargs="?",
        const=DEFAULT_LIMIT_WINDOW,
        default=None,
        metavar="K",
        help=help
        or f"rate limiter: hold prefetches while K units are alive (K={DEFAULT_LIMIT_WINDOW} "
        "if omitted; default: off)",
    )


def add_engine_flags(p: argparse.ArgumentParser, *, with_policy: bool = True) -> None:
    """Flags shared by ``run`` and ``sweep``; ``with_policy=False`` is ``sweep``'s variant,
    whose ``--policies`` sets policy, rate limiter and forward prefetch per point.

    Every help text states its flag's default once (the parsers add none of their own)."""
    _add_engine_group(p, with_policy)
    _add_workload_group(p)
    t = p.add_argument_group("training and capture")
    _add_training_flags(t)
    _add_capture_flags(t)
    _add_flight_flag(t)


def _add_engine_group(p: argparse.ArgumentParser, with_policy: bool) -> None:
    g = p.add_argument_group("engine")
    if with_policy:
        g.add_argument(
            "--policy",
            choices=_values(Policy),
            default="backward_pre",
            help="when the next unit's backward all-gather is issued (default: %(default)s)",
        )
        g.add_argument("--forward-prefetch", action="store_true", help="prefetch in forward too")
        add_limit_flag(g)
    else:
        g.add_argument(
            "--forward-prefetch", action="store_true", help="add +fwd to every configuration"
        )
        add_limit_flag(
            g,
            help="window K of a bare +limit in --policies (configurations without +limit run "
            f"without the rate limiter; default: {DEFAULT_LIMIT_WINDOW})",
            off="configurations without +limit in --policies run without the rate limiter",
        )
    g.add_argument(
        "--sharding",
        choices=_values(Sharding),
        default="full_shard",
        help="full_shard: re-gather in backward; shard_grad_op: keep full parameters from "
        "forward to backward; no_shard: DDP-like all-reduce (default: %(default)s)",
    )
    g.add_argument(
        "--mixed-precision",
        choices=_values(MixedPrecision),
        default="none",
        help="bf16: bf16 compute and all-gather, fp32 shards and gradient reduction "
        "(default: %(default)s)",
    )
    g.add_argument(
        "--no-instrument", action="store_true", help="no profiler ranges (overhead baseline)"
    )
    g.add_argument(
        "--cpu-offload",
        action="store_true",
        help="shards and optimizer in host memory, copied in (h2d) / out (d2h) around "
        "collectives (on CPU runs: same phases, host copies)",
    )
    g.add_argument(
        "--checkpoint-units",
        type=checkpoint_units,
        default="none",
        metavar="{none,all,every-N}",
        help="recompute these units' activations in backward (activation checkpointing; "
        "every-N: every N-th unit, the first included; default: %(default)s)",
    )


def _add_workload_group(p: argparse.ArgumentParser) -> None:
    m = p.add_argument_group("workload")
    m.add_argument(
        "--model",
        choices=_values(ModelKind),
        default="gpt",
        help="gpt: transformer blocks; mlp: Linear + GELU layers (default: %(default)s)",
    )
    m.add_argument(
        "--layers",
        type=int_at_least(1, high=1024),
        default=4,
        metavar="N",
        help="blocks (gpt) or layers (mlp), one sharded unit each (default: %(default)s)",
    )
    m.add_argument(
        "--dim",
        type=int_at_least(1, high=MAX_WIDTH),
        default=256,
        metavar="D",
        help="width (default: %(default)s)",
    )
    m.add_argument(
        "--heads",
        type=int_at_least(1, high=MAX_WIDTH),
        default=4,
        metavar="H",
        help="attention heads (gpt), must divide --dim (default: %(default)s)",
    )
    m.add_argument(
        "--seq-len",
        type=int_at_least(1, high=1 << 20),
        default=128,
        metavar="T",
        help="tokens per sample (default: %(default)s)",
    )
    m.add_argument(
        "--vocab",
        type=int_at_least(2, high=1 << 24),
        default=1024,
        metavar="V",
        help="vocabulary size (default: %(default)s)",
    )


def _add_training_flags(t: argparse._ArgumentGroup) -> None:
    t.add_argument(
        "--nproc",
        type=int_at_least(1, high=MAX_RANKS),
        default=2,
        metavar="N",
        help="ranks (default: %(default)s)",
    )
    t.add_argument(
        "--steps",
        type=int_at_least(1, high=1 << 20),
        default=6,
        metavar="S",
        help="training steps (default: %(default)s)",
    )
    t.add_argument(
        "--global-batch",
        type=int_at_least(1, high=1 << 20),
        default=8,
        metavar="B",
        help="samples per step, split evenly across ranks (default: %(default)s)",
    )
    t.add_argument(
        "--seed",
        type=int_at_least(0, high=(1 << 63) - 1),
        default=0,
        help="seed of weights and data (default: %(default)s)",
    )
    t.add_argument(
        "--lr",
        type=positive_float,
        default=1e-3,
        help="learning rate, a finite number > 0 (default: %(default)s)",
    )


def _add_capture_flags(t: argparse._ArgumentGroup) -> None:
    t.add_argument(
        "--profile-wait",
        type=int_at_least(0, high=1 << 20),
        default=1,
        metavar="N",
        help="steps before the profiler starts (default: %(default)s)",
    )
    t.add_argument(
        "--profile-warmup",
        type=int_at_least(0, high=1 << 20),
        default=1,
        metavar="N",
        help="profiler warm-up steps, not recorded (default: %(default)s)",
    )
    t.add_argument(
        "--profile-active",
        type=int_at_least(1, high=1 << 20),
        default=2,
        metavar="N",
        help="profiled (recorded) steps (default: %(default)s)",
    )
    t.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="auto: cuda if available, else cpu (default: %(default)s)",
    )
    t.add_argument(
        "--backend",
        choices=["auto", "gloo", "nccl"],
        default="auto",
        help="auto: nccl on cuda when every rank has a GPU of its own, else gloo (on cuda: "
        "staged through pinned host memory) (default: %(default)s)",
    )
    t.add_argument(
        "--threads-per-rank",
        type=int_at_least(0, " (0 = auto: cores / --nproc)", high=4096),
        default=0,
        metavar="N",
        help="torch threads per rank; 0 = auto: CPU cores / --nproc, at least 1 "
        "(default: %(default)s)",
    )
    t.add_argument(
        "--link-gbit",
        type=positive_float,
        default=None,
        metavar="R",
        help="run each rank in its own network namespace over a link shaped to R Gbit/s, a "
        "finite number > 0 (needs root and iproute2; default: unshaped loopback)",
    )


def _add_flight_flag(t: argparse._ArgumentGroup) -> None:
    t.add_argument(
        "--flight-recorder",
        type=int_at_least(1, high=1 << 24),
        nargs="?",
        const=20_000,
        default=None,
        metavar="N",
        help="record the last N collectives per rank with torch's Flight Recorder and dump "
        "them to comm_traces/rank_<K> at the end of the run (N: %(const)s when left out; "
        "default: off)",
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
    import torch

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is available here; use --device cpu")
    backend = _backend(args.backend, device, args.nproc, args.link_gbit is not None)
    threads = args.threads_per_rank or max(1, (os.cpu_count() or 1) // max(1, args.nproc))
    try:
        return RunConfig(
            engine=EngineConfig(
                policy=Policy(policy or args.policy),
                forward_prefetch=args.forward_prefetch,
                limit_all_gathers=args.limit_all_gathers,
                sharding=Sharding(args.sharding),
                mixed_precision=MixedPrecision(args.mixed_precision),
                instrument=not args.no_instrument,
                cpu_offload=args.cpu_offload,
                checkpoint_units=args.checkpoint_units,
            ),
            model=ModelConfig(
                kind=ModelKind(args.model),
                layers=args.layers,
                dim=args.dim,
                heads=args.heads,
                seq_len=args.seq_len,
                vocab=args.vocab,
            ),
            window=ProfileWindow(args.profile_wait, args.profile_warmup, args.profile_active),
            nproc=args.nproc,
            steps=args.steps,
            global_batch=args.global_batch,
            seed=args.seed,
            lr=args.lr,
            device=device,
            backend=backend,
            link_gbit=args.link_gbit,
            threads_per_rank=threads,
            flight_recorder=getattr(args, "flight_recorder", None),
        )
    except ValueError as e:
        raise UserError(str(e)) from None
