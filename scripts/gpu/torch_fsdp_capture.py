"""Profile torch FSDP2 (``fully_shard``) and FSDP1 on one GPU, one trace per configuration.

Run by ``scripts/gpu-check-torch-fsdp.sh`` (``--device cuda``: one rank, NCCL); the suite runs
it with ``--device cpu`` (gloo) to check everything but the GPU. For each configuration it
trains the engine's GPT (8 blocks, each an FSDP unit, then the root) for a few steps, profiles
two of them with ``record_shapes``, and writes ``OUT/<config>/rank-0.pt.trace.json.gz``;
``OUT/captures.json`` says what ran, each configuration's step times, and the versions.

**World size 1 and torch's fast paths.** At world size 1 torch skips FSDP's collectives:
FSDP1 turns every sharding strategy into ``NO_SHARD`` (``_init_utils._init_core_state``), and
FSDP2 since torch 2.9/2.10 skips the all-gather and the reduce-scatter (pytorch#160135,
pytorch#162021). A trace would then hold no all-gather at all. Unless ``--torch-fast-path``
is given, the capture switches those shortcuts off, so FSDP runs the code path of any larger
world size and issues its all-gathers and reduce-scatters (NCCL kernels of one rank) on its
own streams; ``captures.json`` says, per configuration, what was switched off.

**Host causes** (``--only`` a name of :data:`HOST_CAUSES`, run by
``scripts/gpu-check-host-causes.sh``): FSDP2 as above, with one known reason for the GPU to
wait on its host in each, and no synchronisation at the step boundary (the host runs ahead as
in a training loop): a slow single-process ``DataLoader``, a ``.item()`` after each block's
forward, many small units whose launches outrun the GPU. Each is a known answer for where the
GPU waits on a real GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import platform
import sys
import textwrap
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from capture_config import CONFIGS, STEPS, WINDOW, Config  # noqa: E402
from host_causes import HOST_CAUSES, batches, item_after_each_block  # noqa: E402
from single_rank import start  # noqa: E402

from overlapscope.config import ModelConfig, ModelKind  # noqa: E402
from overlapscope.engine.workloads import build_model  # noqa: E402
from overlapscope.trace.capture import RankProfiler  # noqa: E402

# -- torch's world-size-1 shortcuts ---------------------------------------------------------


def _rewritten(owner: Any, name: str, old: str, new: str) -> Callable[..., Any] | None:
    """``owner.name`` recompiled from its source with ``old`` replaced by ``new``; None where
    the source has no ``old`` (a torch without that shortcut)."""
    fn = getattr(owner, name)
    fn = getattr(fn, "__wrapped__", fn)
    src = textwrap.dedent(inspect.getsource(fn))
    if old not in src:
        return None
    src = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("@"))
    namespace: dict[str, Any] = {}
    exec(
        compile(src.replace(old, new), inspect.getsourcefile(fn) or "<fsdp>", "exec"),
        fn.__globals__,
        namespace,
    )
    return namespace[name]


@contextlib.contextmanager
def collectives_at_world_size_one(framework: str) -> Iterator[list[str]]:
    """Switch off torch's world-size-1 shortcuts for ``framework`` (module doc); yields the
    list of what was switched off."""
    patched: list[tuple[Any, str, Any]] = []
    done: list[str] = []

    def patch(owner: Any, name: str, old: str, new: str) -> None:
        fn = _rewritten(owner, name, old, new)
        if fn is None:
            return
        original = owner.__dict__[name]
        # the defining module or class, and every FSDP module that imported the name
        holders = [owner] + [
            m
            for key, m in list(sys.modules.items())
            if key.startswith("torch.distributed.fsdp")
            and m is not owner
            and m.__dict__.get(name) is original
        ]
        for holder in holders:
            patched.append((holder, name, original))
            setattr(holder, name, fn)
        done.append(f"{owner.__name__}.{name}")

    try:
        if framework == "fsdp1":
            import torch.distributed.fsdp.fully_sharded_data_parallel  # noqa: F401
            from torch.distributed.fsdp import _init_utils

            patch(_init_utils, "_init_core_state", "if state.world_size == 1:", "if False:")
        else:
            from torch.distributed.fsdp._fully_shard import _fsdp_collectives
            from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

            patch(FSDPParamGroup, "unshard", "if world_size == 1:", "if False:")
            patch(FSDPParamGroup, "wait_for_unshard", "if world_size == 1:", "if False:")
            patch(_fsdp_collectives, "foreach_reduce", "if world_size > 1:", "if True:")
        yield done
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)


@contextlib.contextmanager
def fsdp2_without_backward_prefetch() -> Iterator[None]:
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    original = FSDPParamGroup.__dict__["_backward_prefetch"]
    FSDPParamGroup._backward_prefetch = lambda self: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        FSDPParamGroup._backward_prefetch = original  # type: ignore[method-assign]


# -- wrapping -------------------------------------------------------------------------------


def _bf16(framework: str) -> Any:
    if framework == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy

        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    from torch.distributed.fsdp import MixedPrecision

    return MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def wrap_fsdp2(model: nn.Module, cfg: Config, device: torch.device, bf16: bool) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    kw = {"mesh": mesh, **({"mp_policy": _bf16("fsdp2")} if bf16 else {})}
    blocks = list(model.blocks)  # type: ignore[union-attr, arg-type]
    for block in blocks:
        fully_shard(block, **kw)
    fully_shard(model, **kw)
    depth = cfg.options.get("depth")
    if depth:
        for i, block in enumerate(blocks):
            back = [blocks[j] for j in range(i - 1, max(i - 1 - depth, -1), -1)]
            block.set_modules_to_backward_prefetch(back)  # type: ignore[operator]
    if cfg.options.get("forward"):
        for i, block in enumerate(blocks[:-1]):
            block.set_modules_to_forward_prefetch([blocks[i + 1]])  # type: ignore[operator]
    return model


def wrap_fsdp1(model: nn.Module, cfg: Config, device: torch.device, bf16: bool) -> nn.Module:
    from torch.distributed.fsdp import BackwardPrefetch, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    from overlapscope.engine.workloads import Block

    prefetch = cfg.options.get("backward_prefetch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FSDP(
            model,
            auto_wrap_policy=ModuleWrapPolicy({Block}),
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            backward_prefetch=getattr(BackwardPrefetch, prefetch) if prefetch else None,
            forward_prefetch=bool(cfg.options.get("forward")),
            limit_all_gathers=True,
            mixed_precision=_bf16("fsdp1") if bf16 else None,
            device_id=device,
            use_orig_params=True,
        )


# -- one configuration ------------------------------------------------------------------------


def workload(cfg: Config, args: argparse.Namespace, device: torch.device) -> tuple[dict, int]:
    """The model's dimensions and the batch: the flags', with the configuration's overrides
    on a GPU (a rehearsal on the CPU keeps its tiny model)."""
    dims = {
        "layers": args.layers,
        "dim": args.dim,
        "heads": args.heads,
        "seq_len": args.seq_len,
        "vocab": args.vocab,
    }
    if device.type != "cuda":
        return dims, args.batch
    return {**dims, **cfg.options.get("model", {})}, cfg.options.get("batch", args.batch)


def capture(cfg: Config, args: argparse.Namespace, device: torch.device, out: Path) -> dict:
    dims, batch = workload(cfg, args, device)
    model_cfg = ModelConfig(kind=ModelKind.GPT, **dims)
    free_running = bool(cfg.options.get("free_running"))
    run_dir = out / cfg.name
    run_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        switched = (
            []
            if args.torch_fast_path
            else stack.enter_context(collectives_at_world_size_one(cfg.framework))
        )
        if cfg.options.get("backward_prefetch") is False:
            stack.enter_context(fsdp2_without_backward_prefetch())
        model, _ = build_model(model_cfg, seed=0)
        model = model.to(device)
        wrap = wrap_fsdp2 if cfg.framework == "fsdp2" else wrap_fsdp1
        model = wrap(model, cfg, device, bf16=device.type == "cuda")
        if cfg.options.get("item_per_block"):
            item_after_each_block(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        step_us = []
        with RankProfiler(run_dir, dist.get_rank(), WINDOW, device.type == "cuda") as prof:
            data = batches(model_cfg, cfg, batch)
            t0 = time.perf_counter()
            for _step in range(STEPS):
                x, y = next(data)
                loss = model(x.to(device), y.to(device))
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if device.type == "cuda" and not free_running:
                    torch.cuda.synchronize()  # step boundary: wall time of the device's work
                t1 = time.perf_counter()
                step_us.append((t1 - t0) * 1e6)
                t0 = t1
                prof.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        del model, opt
    return {
        "config": cfg.name,
        "framework": cfg.framework,
        "what": cfg.what,
        "options": cfg.options,
        "world_size_one_shortcuts_switched_off": switched,
        "model": {"kind": "gpt", **dims, "batch": batch},
        "bf16": device.type == "cuda",
        "steps": STEPS,
        # free running: the host loop's time per step (it runs ahead of the GPU by up to a
        # step); else the device's, the loop synchronising at each step's end
        "step_time_is": "host loop" if free_running else "synchronised step",
        "profiled_steps": list(WINDOW.active_steps()),
        "step_time_us": step_us,
        "loss_last": float(loss.detach().float().cpu()),
    }


def environment(device: torch.device) -> dict[str, Any]:
    env: dict[str, Any] = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "backend": dist.get_backend(),
        "world_size": dist.get_world_size(),
    }
    if device.type == "cuda":
        env.update(
            gpu=torch.cuda.get_device_name(device),
            cuda=torch.version.cuda,
            nccl=".".join(map(str, torch.cuda.nccl.version())),
        )
    return env


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--only", nargs="*", help="configuration names (default: all)")
    p.add_argument(
        "--torch-fast-path",
        action="store_true",
        help="keep torch's world-size-1 shortcuts (no collectives at all)",
    )
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--batch", type=int, default=16)
    args = p.parse_args(argv)
    device = start(args.device, "torch_fsdp_capture", 29400)
    if device is None:
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"environment": environment(device), "configs": {}}
    failed = 0
    chosen = [c for c in CONFIGS + HOST_CAUSES if c.name in (args.only or [])]
    unknown = sorted(set(args.only or []) - {c.name for c in chosen})
    if unknown:
        names = ", ".join(c.name for c in CONFIGS + HOST_CAUSES)
        print(f"torch_fsdp_capture: --only {' '.join(unknown)}: no such configuration; "
              f"choose from {names}", file=sys.stderr)  # fmt: skip
        return 2
    for cfg in chosen if args.only else CONFIGS:
        t0 = time.perf_counter()
        try:
            meta = capture(cfg, args, device, args.out)
            results["configs"][cfg.name] = meta
            med = sorted(meta["step_time_us"][s] for s in meta["profiled_steps"])[0] / 1e3
            print(
                f"  {cfg.name:<24} ok  {time.perf_counter() - t0:5.1f} s  "
                f"profiled step {med:.1f} ms  shortcuts off: {meta['world_size_one_shortcuts_switched_off']}",
                flush=True,
            )
        except Exception as e:  # keep going: one failure must not cost the other captures
            failed += 1
            results["configs"][cfg.name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"  {cfg.name:<24} FAILED {type(e).__name__}: {e}", flush=True)
    (args.out / "captures.json").write_text(json.dumps(results, indent=1) + "\n")
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
