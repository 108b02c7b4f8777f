"""Engine benchmarks, each a ratio measured side by side in one run (configs interleaved).

    python benchmarks/engine_bench.py policy   [--links 1,0.5,none] [--steps 8] [--repeats 3]
                                               [--no-limiter] [--name policy]
    python benchmarks/engine_bench.py overhead [--link none] [--active 8] [--clean 8] [--repeats 3]
    python benchmarks/engine_bench.py fsdp2    [--links 1,none] [--repeats 3]

``policy``: one ``overlapscope sweep`` per link (``none`` = unshaped loopback) over
``none, backward_post, backward_pre`` (+ ``backward_pre+limit=2`` and ``+limit=1`` on the
first link, for peak memory); the sweep runs its configurations round-robin. Prints three
tables: step-time speedup over ``none``, overlap efficiency of ``backward_pre`` (analysis
``bound``: actual step / ideal Σ max(T_comp, T_comm)), and peak memory in units of one
block's full parameters.

``overhead``: ``overlapscope run`` with and without ``--no-instrument``, alternated; plus a
bottom-up estimate (engine ranges per step x the cost of one range while profiling).

``fsdp2``: ``overlapscope run --policy backward_pre`` and ``benchmarks/fsdp2_worker.py``
(torch ``fully_shard``, same model/seed/batch/steps/profiler window), alternated, per link.

Step time, two ways, both "slowest rank per step, median over steps", from each run's
``run.json`` ``step_time_us`` (the worker's ``perf_counter`` around the whole step):
``clean`` = steps outside the profiler's schedule (neither step 0 nor wait..active: no
profiler work at all); ``profiled`` = the profiler's active steps (what the traces show).
Ratios are taken per repeat (the configs of one round ran back to back), then the median
and the min..max over repeats are reported. Raw runs go under ``--work`` (default /tmp);
the results go to ``docs/bench/<name>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from engine_bench_common import (
    LIMITED,
    MODEL,
    POLICIES,
    REPO,
    TRAIN,
    analysis_json,
    exposed_bwd_ag_ms,
    fmt,
    link_args,
    link_label,
    manifest_of,
    overlapscope,
    ratio_stats,
    run_step_times_ms,
    save,
    step_times_ms,
)

from overlapscope.config import ProfileWindow

# -- policy: speedup, overlap efficiency, peak memory ------------------------------------


def bench_policy(args: argparse.Namespace) -> None:
    links = args.links.split(",")
    result: dict[str, Any] = {"command": " ".join(sys.argv), "model": MODEL, "links": {}}
    result["steps"] = args.steps
    for i, link in enumerate(links):
        configs = POLICIES + (LIMITED if i == 0 and not args.no_limiter else [])
        out = args.work / f"{args.name}-sweep-{link}"
        train = [*TRAIN[:2], "--steps", str(args.steps), *TRAIN[4:]]  # more clean steps
        overlapscope(
            "sweep", "--policies", ",".join(configs), "--repeats", str(args.repeats),
            *MODEL, *train, *link_args(link), "--out", str(out), "--force",
        )  # fmt: skip
        runs: dict[str, list[dict[str, Any]]] = {}
        for config in configs:
            for rep in range(args.repeats):
                run_dir = out / "runs" / config / f"rep-{rep}"
                meta = manifest_of(run_dir)
                analysis = analysis_json(run_dir)
                bound = analysis["bound"]["summary"]
                blocks = [u.full_bytes for u in meta.units or () if u.name != "root"]
                runs.setdefault(config, []).append(
                    {
                        **run_step_times_ms(run_dir),
                        "peak_mem_bytes": max(meta.peak_mem_bytes),
                        "unit_full_bytes": max(blocks),
                        "max_alive_units": max(meta.max_alive_units),
                        "exposed_bwd_ag_ms": exposed_bwd_ag_ms(analysis),
                        "actual_over_ideal": bound["actual_per_step_us"]
                        / bound["ideal_per_step_us"],
                        "bound": bound,
                    }
                )
        result["links"][link] = runs
    save(args.name, result)
    print_policy(result, links)


def print_policy(result: dict[str, Any], links: list[str]) -> None:
    print("\n### Speedup over `none` (step time of none / step time of policy)\n")
    print("| link | policy | clean steps | profiled steps | none clean ms | exposed bwd AG ms |")
    print("|---|---|---:|---:|---:|---:|")
    for link in links:
        runs = result["links"][link]
        base = runs["none"]
        for policy in [c for c in runs if c != "none"]:
            rows = runs[policy]
            speed = {
                kind: ratio_stats([b[kind] / r[kind] for b, r in zip(base, rows, strict=True)])
                for kind in ("clean_ms", "profiled_ms")
            }
            ag = np.median([r["exposed_bwd_ag_ms"] for r in rows])
            print(
                f"| {link_label(link)} | {policy} | {fmt(speed['clean_ms'])} | "
                f"{fmt(speed['profiled_ms'])} | "
                f"{np.median([b['clean_ms'] for b in base]):.0f} | {ag:.0f} |"
            )
    print("\n### Overlap efficiency of `backward_pre` (actual step / ideal)\n")
    print("| link | actual / ideal | actual ms | ideal ms | serial ms |")
    print("|---|---:|---:|---:|---:|")
    for link in links:
        rows = result["links"][link]["backward_pre"]
        stats = ratio_stats([r["actual_over_ideal"] for r in rows])
        med = {k: np.median([r["bound"][k] for r in rows]) / 1e3 for k in rows[0]["bound"]}
        print(
            f"| {link_label(link)} | {fmt(stats)} | {med['actual_per_step_us']:.0f} | "
            f"{med['ideal_per_step_us']:.0f} | {med['serial_per_step_us']:.0f} |"
        )
    link = links[0]
    runs = result["links"][link]
    if not all(c in runs for c in LIMITED):
        return
    unit = runs["none"][0]["unit_full_bytes"]
    print(f"\n### Peak memory ({link_label(link)}; unit = one block's full params, {unit} B)\n")
    print("| config | peak MiB | peak / unit | (peak - none) / unit | max units alive |")
    print("|---|---:|---:|---:|---:|")
    for config in [*POLICIES, *LIMITED]:
        rows = runs[config]
        extra = [
            (r["peak_mem_bytes"] - b["peak_mem_bytes"]) / unit
            for b, r in zip(runs["none"], rows, strict=True)
        ]
        peak = ratio_stats([r["peak_mem_bytes"] / 2**20 for r in rows])
        units = ratio_stats([r["peak_mem_bytes"] / unit for r in rows])
        alive = max(r["max_alive_units"] for r in rows)
        print(f"| {config} | {fmt(peak, 1)} | {fmt(units)} | {fmt(ratio_stats(extra))} | {alive} |")


# -- overhead: instrumentation on vs off -------------------------------------------------


def bench_overhead(args: argparse.Namespace) -> None:
    variants = {"instrumented": [], "no_instrument": ["--no-instrument"]}
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    # more profiled steps than the other benchmarks: the ranges only record while profiling
    window = ["--profile-wait", "2", "--profile-warmup", "1", "--profile-active"]
    # steps 0-1 profiler wait, 2 warmup, then --active profiled, then --clean clean ones
    steps = 3 + args.active + args.clean
    train = ["--global-batch", "4", "--steps", str(steps), *window, str(args.active)]
    for rep in range(args.repeats):
        for name, extra in variants.items():
            out = args.work / f"overhead-{name}-{rep}"
            overlapscope(
                "run", "--policy", "backward_pre", *extra, *MODEL, *train,
                *link_args(args.link), "--out", str(out), "--force",
            )  # fmt: skip
            runs[name].append(run_step_times_ms(out))
    ranges = ranges_per_step(args.work / "overhead-instrumented-0")
    cost_us = range_cost_us()
    result = {
        "command": " ".join(sys.argv),
        "link": args.link,
        "train": train,
        "runs": runs,
        "ranges_per_step_per_rank": ranges,
        "range_cost_us_profiling": cost_us,
    }
    save("overhead", result)
    est = ranges * cost_us / 1e3
    on_ms = float(np.median([r["profiled_ms"] for r in runs["instrumented"]]))
    print(
        f"\nBottom-up: {ranges:.0f} ranges per step per rank x {cost_us:.1f} us per range "
        f"(profiler on) = {est:.2f} ms per step = {100 * est / on_ms:.2f}% of a profiled step"
    )
    print(f"\n### Instrumentation overhead ({link_label(args.link)}, backward_pre)\n")
    print("| steps | instrumented ms | no-instrument ms | instrumented / off |")
    print("|---|---:|---:|---:|")
    for kind in ("clean_ms", "profiled_ms"):
        on = [r[kind] for r in runs["instrumented"]]
        off = [r[kind] for r in runs["no_instrument"]]
        stats = ratio_stats([a / b for a, b in zip(on, off, strict=True)])
        print(f"| {kind[:-3]} | {np.median(on):.0f} | {np.median(off):.0f} | {fmt(stats, 3)} |")


def ranges_per_step(run_dir: Path) -> float:
    """The engine's own profiler ranges (``ovs/...``) per profiled step, rank 0."""
    import gzip

    meta = manifest_of(run_dir)
    with gzip.open(run_dir / meta.traces[0]) as f:
        events = json.load(f)["traceEvents"]
    names = [e["name"] for e in events if e.get("cat") == "user_annotation"]
    return sum(n.startswith("ovs/") for n in names) / len(meta.profiled_steps)


def range_cost_us(n: int = 20_000) -> float:
    """Enter + exit of one ``record_function`` range while the profiler records (best of 3)."""
    import time

    from torch.autograd.profiler import record_function
    from torch.profiler import ProfilerActivity, profile

    def once() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            with record_function("ovs/bwd/blocks.0"):
                pass
        return (time.perf_counter() - t0) / n * 1e6

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True):
        return min(once() for _ in range(3))


# -- fsdp2: our engine vs torch fully_shard ----------------------------------------------


def fsdp2_config(run_dir: Path) -> Path:
    """The RunConfig ``overlapscope run`` wrote for the paired engine run, reused as-is."""
    cfg = run_dir / "config.json"
    if not cfg.exists():  # the engine writes config.json into the run directory
        raise FileNotFoundError(f"{cfg}: the engine run has no config.json")
    return cfg


def run_fsdp2(cfg_path: Path, out: Path, link: str) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    worker = str(REPO / "benchmarks" / "fsdp2_worker.py")
    env = {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore::FutureWarning"}
    print("$ fsdp2_worker", out, link, file=sys.stderr, flush=True)
    if link == "none":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += ["--nnodes", "1", "--nproc-per-node", "2", worker, str(out), str(cfg_path)]
        with (out / "launcher.log").open("wb") as log:
            rc = subprocess.run(cmd, env={**os.environ, **env}, stdout=log, stderr=log).returncode
        codes = [rc]
    else:
        from overlapscope.lab import RankSlot, shaped_network

        with shaped_network(2, float(link)) as lab:

            def argv(slot: RankSlot) -> list[str]:
                return [
                    sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                    "--node-rank", str(slot.rank), "--nproc-per-node", "1",
                    "--master-addr", lab.master_addr, "--master-port", str(lab.master_port),
                    worker, str(out), str(cfg_path),
                ]  # fmt: skip

            codes = lab.run_ranks(argv, env, out / "logs", 900, on_rank0_line=lambda s: None)
    if any(codes):
        # Rank 0 writes fsdp2.json after every rank has finished training and gathered its
        # times; torch 2.13's gloo teardown then sometimes aborts both ranks ("terminate
        # called without an active exception", seen on loopback): keep the results.
        if not (out / "fsdp2.json").is_file():
            raise RuntimeError(f"fsdp2 worker failed ({codes}); logs under {out}")
        print(f"fsdp2 worker exited {codes} after writing its results (teardown); "
              f"logs under {out}", file=sys.stderr)  # fmt: skip
    fsdp2 = json.loads((out / "fsdp2.json").read_text())
    window = ProfileWindow(**json.loads(cfg_path.read_text())["window"])
    return {**step_times_ms(fsdp2["step_time_us"], window, fsdp2["profiled_steps"]),
            "peak_mem_bytes": max(fsdp2["peak_mem_bytes"])}  # fmt: skip


def bench_fsdp2(args: argparse.Namespace) -> None:
    links = args.links.split(",")
    result: dict[str, Any] = {"command": " ".join(sys.argv), "links": {}}
    for link in links:
        runs: dict[str, list[dict[str, Any]]] = {"engine": [], "fsdp2": []}
        for rep in range(args.repeats):
            out = args.work / f"fsdp2-{link}-engine-{rep}"
            overlapscope(
                "run", "--policy", "backward_pre", *MODEL, *TRAIN, *link_args(link),
                "--out", str(out), "--force",
            )  # fmt: skip
            meta = manifest_of(out)
            runs["engine"].append(
                {**run_step_times_ms(out), "peak_mem_bytes": max(meta.peak_mem_bytes)}
            )
            cfg = args.work / f"fsdp2-{link}-config.json"
            cfg.write_text(json.dumps(meta.config_dict(), indent=1))
            runs["fsdp2"].append(run_fsdp2(cfg, args.work / f"fsdp2-{link}-torch-{rep}", link))
        result["links"][link] = runs
    save("fsdp2", result)
    print("\n### Engine (backward_pre) vs torch FSDP2 (fully_shard)\n")
    print("| link | step: FSDP2 / engine (clean) | (profiled) | engine ms | FSDP2 ms |"
          " peak mem: FSDP2 / engine | engine MiB | FSDP2 MiB |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for link in links:
        eng, tor = result["links"][link]["engine"], result["links"][link]["fsdp2"]
        pairs = list(zip(eng, tor, strict=True))
        step = {
            k: ratio_stats([t[k] / e[k] for e, t in pairs]) for k in ("clean_ms", "profiled_ms")
        }
        mem = ratio_stats([t["peak_mem_bytes"] / e["peak_mem_bytes"] for e, t in pairs])
        print(
            f"| {link_label(link)} | {fmt(step['clean_ms'])} | {fmt(step['profiled_ms'])} | "
            f"{np.median([e['clean_ms'] for e in eng]):.0f} | "
            f"{np.median([t['clean_ms'] for t in tor]):.0f} | {fmt(mem)} | "
            f"{np.median([e['peak_mem_bytes'] for e in eng]) / 2**20:.1f} | "
            f"{np.median([t['peak_mem_bytes'] for t in tor]) / 2**20:.1f} |"
        )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="bench", required=True)
    commands: dict[str, Callable[[argparse.Namespace], None]] = {
        "policy": bench_policy,
        "overhead": bench_overhead,
        "fsdp2": bench_fsdp2,
    }
    for name in commands:
        s = sub.add_parser(name)
        s.add_argument("--repeats", type=int, default=3)
        s.add_argument("--work", type=Path, default=Path("/tmp/overlapscope-bench"))
        if name == "overhead":
            s.add_argument("--link", default="none", help="Gbit/s, or none (loopback)")
            s.add_argument("--active", type=int, default=8, help="profiled steps per run")
            s.add_argument("--clean", type=int, default=8, help="steps after the profiler")
        else:
            default = "1,0.5,none" if name == "policy" else "1,none"
            s.add_argument("--links", default=default, help="Gbit/s list; none = loopback")
        if name == "policy":
            s.add_argument("--name", default="policy", help="results: docs/bench/NAME.json")
            s.add_argument("--steps", type=int, default=8, help="steps per run (>= 6)")
            s.add_argument(
                "--no-limiter", action="store_true", help="skip the +limit configs (memory)"
            )
    args = p.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    commands[args.bench](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
