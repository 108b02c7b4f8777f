"""The engine's checks on one GPU, in one process (world size 1, NCCL): parity, no device
synchronisation on the communication path, and the instrumentation's overhead.

Run by ``scripts/gpu-check-engine.sh``; ``--device cpu`` (gloo) runs the same code on the CPU
(the suite does, to keep this script working where there is no GPU)::

    python scripts/gpu/engine_checks.py parity   --out DIR [--device cuda|cpu]
    python scripts/gpu/engine_checks.py overhead --out DIR [--device cuda|cpu]

``parity``: parameters after 3 SGD steps of the sharded engine against the same model
trained unsharded, fp32 and bf16, with and without ``--cpu-offload`` and
``--checkpoint-units all``; then every policy (with and without forward prefetch, fp32 and
bf16) trained with ``torch.cuda.set_sync_debug_mode("error")`` around forward and backward,
which raises on any CPU-GPU synchronisation there. Writes ``DIR/parity.json``.

``overhead``: the same model wrapped twice, instrumented and not (``--no-instrument``),
trained in alternating blocks of steps; the median step time of each and the difference.
Writes ``DIR/overhead.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from single_rank import start  # noqa: E402

from overlapscope.config import EngineConfig, ModelConfig, ModelKind  # noqa: E402
from overlapscope.engine.sharded import ShardedModel  # noqa: E402
from overlapscope.engine.workloads import build_model, global_batch  # noqa: E402

PARITY_MODEL = ModelConfig(kind=ModelKind.GPT, layers=3, dim=64, heads=2, seq_len=16, vocab=64)
PARITY_BATCH = 4
PARITY_STEPS = 3
MP = {"fp32": "none", "bf16": "bf16"}  # --mixed-precision for each precision
FP32_TOL = 1e-5
BF16_TOL = 2e-2


def _sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def reference(device: torch.device) -> dict[str, torch.Tensor]:
    model, _ = build_model(PARITY_MODEL, seed=0)
    model = model.to(device)
    opt = _sgd(model.parameters())
    for step in range(PARITY_STEPS):
        x, y = global_batch(PARITY_MODEL, PARITY_BATCH, step, seed=0)
        model(x.to(device), y.to(device)).backward()
        opt.step()
        opt.zero_grad()
    return {k: v.detach().float().cpu() for k, v in model.named_parameters()}


def train_engine(
    cfg: EngineConfig, device: torch.device, sync_debug: bool = False
) -> dict[str, torch.Tensor]:
    """3 steps of the engine; with ``sync_debug`` every step after the first runs forward and
    backward under ``set_sync_debug_mode("error")`` (the first step records the schedule)."""
    model, units = build_model(PARITY_MODEL, seed=0)
    sharded = ShardedModel(model.to(device), units, cfg, device=device)
    opt = _sgd(sharded.parameters())
    checked = sync_debug and device.type == "cuda"
    for step in range(PARITY_STEPS):
        x, y = global_batch(PARITY_MODEL, PARITY_BATCH, step, seed=0)
        x, y = x.to(device), y.to(device)
        if checked and step > 0:
            torch.cuda.set_sync_debug_mode("error")
        try:
            sharded(x, y).backward()
        finally:
            if checked:
                torch.cuda.set_sync_debug_mode("default")
        sharded.optimizer_step(opt)
        opt.zero_grad()
    state = {k: v.cpu() for k, v in sharded.full_state_dict().items()}
    sharded.close()
    return state


def _sync_debug_control(device: torch.device) -> dict[str, Any]:
    """The check can fail: a deliberate ``.item()`` under the same mode must raise."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        torch.ones(1, device=device).sum().item()
        raised = False
    except RuntimeError:
        raised = True
    finally:
        torch.cuda.set_sync_debug_mode("default")
    print(f"  sync debug mode control (.item() must raise): {'ok' if raised else 'FAILED'}")
    return {"check": "sync_debug_control", "ok": raised}


def _max_err(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _parity_rows(device: torch.device) -> list[dict[str, Any]]:
    """The engine against the unsharded reference: fp32 and bf16, with and without CPU
    offload and checkpointing."""
    ref = reference(device)
    rows: list[dict[str, Any]] = []
    for precision, offload, ckpt in itertools.product(
        ("fp32", "bf16"), (False, True), ("none", "all")
    ):
        cfg = EngineConfig(
            policy="backward_pre",
            mixed_precision=MP[precision],
            cpu_offload=offload,
            checkpoint_units=ckpt,
        )
        err = _max_err(train_engine(cfg, device), ref)
        ok = err <= FP32_TOL if precision == "fp32" else 0 < err < BF16_TOL
        rows.append(
            {
                "check": "parity",
                "precision": precision,
                "cpu_offload": offload,
                "checkpoint_units": ckpt,
                "max_abs_err": err,
                "ok": ok,
            }
        )
        print(
            f"  parity {precision} offload={offload!s:<5} ckpt={ckpt:<4} "
            f"max |err| {err:.2e}  {'ok' if ok else 'FAILED'}",
            flush=True,
        )
    return rows


def _sync_rows(device: torch.device) -> list[dict[str, Any]]:
    """Every policy, with and without forward prefetch, fp32 and bf16, trained with torch
    raising on any synchronisation in forward and backward (after a control that must)."""
    rows = [_sync_debug_control(device)] if device.type == "cuda" else []
    for policy, fwd, precision in itertools.product(
        ("none", "backward_post", "backward_pre"), (False, True), ("fp32", "bf16")
    ):
        cfg = EngineConfig(policy=policy, forward_prefetch=fwd, mixed_precision=MP[precision])
        row: dict[str, Any] = {
            "check": "sync_debug",
            "policy": policy,
            "forward_prefetch": fwd,
            "precision": precision,
        }
        try:
            train_engine(cfg, device, sync_debug=True)
            row.update(ok=True, error=None)
        except RuntimeError as e:
            row.update(ok=False, error=str(e).splitlines()[0])
        rows.append(row)
        verdict = "ok" if row["ok"] else "FAILED: " + row["error"]
        if device.type != "cuda":
            verdict = "trained (sync debug mode exists on CUDA only: not checked)"
        print(
            f"  no device sync in forward/backward: {policy:<13} fwd={fwd!s:<5} "
            f"{precision}  {verdict}",
            flush=True,
        )
    return rows


def parity(device: torch.device, out: Path) -> bool:
    rows = _parity_rows(device) + _sync_rows(device)
    doc = {
        "device": _device_name(device),
        "sync_debug_checked": device.type == "cuda",
        "fp32_tol": FP32_TOL,
        "bf16_tol": BF16_TOL,
        "rows": rows,
    }
    (out / "parity.json").write_text(json.dumps(doc, indent=1) + "\n")
    return all(r["ok"] for r in rows)


def _timed_steps(
    sharded: ShardedModel,
    opt: torch.optim.Optimizer,
    model_cfg: ModelConfig,
    batch: int,
    steps: int,
    first: int,
    device: torch.device,
) -> list[tuple[float, float]]:
    """Per step: (wall µs to the end of the device's work, the host thread's CPU µs to issue
    it; the synchronisation at the end is outside the CPU time: it can spin)."""
    out = []
    for step in range(first, first + steps):
        x, y = global_batch(model_cfg, batch, step, seed=0)
        t0, c0 = time.perf_counter(), time.thread_time()
        sharded(x.to(device), y.to(device)).backward()
        sharded.optimizer_step(opt)
        opt.zero_grad(set_to_none=True)
        c1 = time.thread_time()
        if device.type == "cuda":
            torch.cuda.synchronize()  # step boundary: the device's time, not the issue time
        out.append(((time.perf_counter() - t0) * 1e6, (c1 - c0) * 1e6))
    return out


def _range_cost(n: int = 20000) -> dict[str, float]:
    """Host CPU µs of one engine phase range (enter + exit), profiler off, on and not."""
    from overlapscope.engine.instrument import Instrument
    from overlapscope.trace.naming.ranges import Phase

    out = {}
    for name, enabled in (("instrumented", True), ("no-instrument", False)):
        ins = Instrument(enabled)
        t0 = time.thread_time()
        for _ in range(n):
            with ins.phase(Phase.AG_FWD, "blocks.0"):
                pass
        out[name] = round((time.thread_time() - t0) / n * 1e6, 3)
    return out


def _warmed_up(
    model_cfg: ModelConfig, batch: int, precision: str, instrument: bool, device: torch.device
) -> tuple[ShardedModel, torch.optim.Optimizer]:
    """The model wrapped (instrumented or not), with its optimizer, after 3 steps."""
    model, units = build_model(model_cfg, seed=0)
    cfg = EngineConfig(policy="backward_pre", mixed_precision=MP[precision], instrument=instrument)
    sharded = ShardedModel(model.to(device), units, cfg, device=device)
    opt = torch.optim.AdamW(sharded.parameters(), lr=1e-4)
    _timed_steps(sharded, opt, model_cfg, batch, 3, 0, device)  # warm-up
    return sharded, opt


def _overhead_at(
    device: torch.device, args: argparse.Namespace, batch: int, precision: str
) -> dict[str, Any]:
    """Median step time instrumented and not, in ``args.rounds`` alternating rounds."""
    model_cfg = ModelConfig(
        kind=ModelKind.GPT,
        layers=args.layers,
        dim=args.dim,
        heads=args.heads,
        seq_len=args.seq_len,
        vocab=args.vocab,
    )
    variants = {
        name: _warmed_up(model_cfg, batch, precision, instrument, device)
        for name, instrument in (("instrumented", True), ("no-instrument", False))
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    paired: list[float] = []  # per round: median instrumented - median not (wall)
    order = list(variants)
    for r in range(args.rounds):  # alternate, so drift hits both alike
        medians = {}
        for name in order if r % 2 == 0 else order[::-1]:
            sharded, opt = variants[name]
            got = _timed_steps(
                sharded, opt, model_cfg, batch, args.steps, 3 + r * args.steps, device
            )
            times[name] += [w for w, _ in got]
            cpu[name] += [c for _, c in got]
            medians[name] = statistics.median(w for w, _ in got)
        paired.append(medians["instrumented"] - medians["no-instrument"])
    for sharded, _ in variants.values():
        sharded.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    diff = statistics.median(paired)
    model = {f: getattr(args, f) for f in ("layers", "dim", "heads", "seq_len", "vocab")}
    return {
        "model": {**model, "batch": batch, "precision": precision, "policy": "backward_pre"},
        "rounds": args.rounds,
        "steps_per_round": args.steps,
        "median_step_us": med,
        "overhead_us": diff,
        "overhead_pct": 100 * diff / med["no-instrument"],
        "paired_round_diff_us": paired,
        "median_host_cpu_us": {k: statistics.median(v) for k, v in cpu.items()},
        "step_us": times,
        "host_cpu_us": cpu,
    }


def overhead(device: torch.device, out: Path, args: argparse.Namespace) -> bool:
    """Per batch in ``--batch`` (a host-bound and a device-bound step): the instrumentation's
    cost, as the median over rounds of (instrumented - not) of the rounds' median steps."""
    precision = "bf16" if device.type == "cuda" else "fp32"
    doc: dict[str, Any] = {
        "device": _device_name(device),
        "by_batch": [],
        "range_cpu_us": _range_cost(),
    }
    print(f"  one phase range (enter + exit), host CPU: {doc['range_cpu_us']}", flush=True)
    for batch in args.batch:
        got = _overhead_at(device, args, batch, precision)
        doc["by_batch"].append(got)
        med, spread = got["median_step_us"], got["paired_round_diff_us"]
        print(
            f"  instrumentation overhead, batch {batch}: median step "
            f"{med['instrumented'] / 1e3:.3f} ms instrumented vs "
            f"{med['no-instrument'] / 1e3:.3f} ms not; paired rounds "
            f"{got['overhead_pct']:+.2f}% (round differences {min(spread) / 1e3:+.3f} to "
            f"{max(spread) / 1e3:+.3f} ms; {args.rounds} rounds of {args.steps} steps)",
            flush=True,
        )
    (out / "overhead.json").write_text(json.dumps(doc, indent=1) + "\n")
    return True


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("check", choices=["parity", "overhead"])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument(
        "--batch",
        type=int,
        nargs="+",
        default=[8, 32],
        help="overhead: global batches to measure at (default: 8 32)",
    )
    args = p.parse_args(argv)
    device = start(args.device, "engine_checks", 29300)
    if device is None:
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    checks: dict[str, Callable[[], bool]] = {
        "parity": lambda: parity(device, args.out),
        "overhead": lambda: overhead(device, args.out, args),
    }
    ok = checks[args.check]()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
