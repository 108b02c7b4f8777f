"""How much the lab's network traffic slows compute on the same cores, per link rate and tbf burst.

    python benchmarks/lab_contention.py [--links 0.25,1] [--collectives 30] [--out FILE]

Two ranks in a lab. On each rank the main thread runs a training-sized compute step (an MLP
block, forward and backward) in a loop, first alone, then while a second thread runs
``--collectives`` all-gathers (then reduce-scatters) of 3 MiB through the engine's own lane,
back to back. Reported per (link, burst, phase): the compute step's median and mean time and
their ratio to the step alone, the CPU the machine spent in softirq and in gloo's transport
thread, and the TCP segments rank 0 received (after the kernel merged them). The burst is
both ``TbfShape.for_gbit`` (what the lab uses) and 64 KiB (what it used below 0.26 Gbit/s
before the fix in ``overlapscope/lab/network.py``), side by side in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

WARMUP_STEPS = 20
ALONE_STEPS = 60
MESSAGE_BYTES = 3 << 20


# --------------------------------------------------------------------------- worker (one rank)


def _thread_cpu_ticks() -> dict[str, int]:
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[f"{name}-{tid}"] = int(fields[11]) + int(fields[12])  # utime + stime
    return out


def _machine_ticks() -> dict[str, int]:
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq")
    values = Path("/proc/stat").read_text().splitlines()[0].split()[1:8]
    return dict(zip(names, (int(v) for v in values), strict=True))


def _tcp_in_segments() -> int:
    rows = [ln.split() for ln in Path("/proc/self/net/snmp").read_text().splitlines()]
    tcp = [r for r in rows if r and r[0] == "Tcp:"]
    return int(tcp[1][tcp[0].index("InSegs")])


def _measure_phase(
    phase: str, compute_step: Callable[[], float], traffic: Callable[[str], None]
) -> dict[str, Any]:
    """Compute steps alone, or while ``traffic(phase)`` runs on a second thread: step times,
    and the CPU spent in softirq and gloo's threads and TCP segments received meanwhile."""
    threads0, machine0, segs0 = _thread_cpu_ticks(), _machine_ticks(), _tcp_in_segments()
    t0 = time.perf_counter()
    steps: list[float] = []
    if phase == "alone":
        steps = [compute_step() for _ in range(ALONE_STEPS)]
    else:
        th = threading.Thread(target=traffic, args=(phase,))
        th.start()
        while th.is_alive():
            steps.append(compute_step())
        th.join()
    elapsed = time.perf_counter() - t0
    threads1, machine1 = _thread_cpu_ticks(), _machine_ticks()
    gloo = sum(v - threads0.get(k, 0) for k, v in threads1.items() if k.startswith("gloo"))
    return {
        "elapsed_s": elapsed,
        "compute_steps": len(steps),
        "median_us": 1e6 * statistics.median(steps),
        "mean_us": 1e6 * statistics.mean(steps),
        "softirq_ticks": machine1["softirq"] - machine0["softirq"],
        "gloo_thread_ticks": gloo,
        "tcp_in_segments": _tcp_in_segments() - segs0,
    }


def worker(argv: list[str]) -> int:
    import torch
    import torch.distributed as dist

    from overlapscope.engine.comm import Collectives, new_comm_group

    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--master", required=True)
    ap.add_argument("--collectives", type=int, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{args.master}",
        rank=args.rank,
        world_size=2,
        timeout=timedelta(seconds=120),
    )
    comm = Collectives(new_comm_group("gloo"), "gloo")
    lane = comm.lane
    assert lane is not None
    torch.manual_seed(0)
    block = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)
    )
    x = torch.randn(512, 256)

    def compute_step() -> float:
        t0 = time.perf_counter()
        block(x).sum().backward()
        return time.perf_counter() - t0

    full = torch.empty(MESSAGE_BYTES // 4)
    shard = torch.randn(full.numel() // 2)

    def traffic(kind: str) -> None:
        for _ in range(args.collectives):
            if kind == "all_gather":
                lane.all_gather(full, shard).wait()
            else:
                lane.reduce_scatter_sum(full.clone()).wait()

    for _ in range(WARMUP_STEPS):
        compute_step()
    result: dict[str, Any] = {}
    try:
        for phase in ("alone", "all_gather", "reduce_scatter"):
            dist.barrier()
            result[phase] = _measure_phase(phase, compute_step, traffic)
            dist.barrier()
    finally:
        comm.close()
        dist.destroy_process_group()
    if args.rank == 0:
        print("RESULT " + json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------- driver


def measure(link_gbit: float, burst_bytes: int, collectives: int) -> dict[str, Any]:
    from overlapscope.lab import TbfShape, shaped_network

    base = TbfShape.for_gbit(link_gbit)
    shape = TbfShape(base.rate_bit_s, burst_bytes, base.latency_ms)
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as logs, shaped_network(2, link_gbit, shape=shape) as lab:
        master = f"{lab.master_addr}:{lab.master_port}"
        worker_args = ["worker", "--master", master, "--collectives", str(collectives)]
        codes = lab.run_ranks(
            lambda slot: [sys.executable, __file__, *worker_args, "--rank", str(slot.rank)],
            {"OMP_NUM_THREADS": "1"},
            Path(logs),
            timeout_s=600,
            on_rank0_line=lines.append,
        )
        if codes != [0, 0]:
            tail = (Path(logs) / "rank-0.log").read_text()[-2000:]
            raise SystemExit(f"lab_contention: ranks exited {codes}\n{tail}")
    (res,) = [json.loads(ln.removeprefix("RESULT ")) for ln in lines if ln.startswith("RESULT ")]
    alone = res["alone"]
    for phase in ("all_gather", "reduce_scatter"):
        r = res[phase]
        r["median_vs_alone"] = r["median_us"] / alone["median_us"]
        r["mean_vs_alone"] = r["mean_us"] / alone["mean_us"]
        r["bytes_per_in_segment"] = (
            collectives * MESSAGE_BYTES / 2 / r["tcp_in_segments"] if r["tcp_in_segments"] else None
        )
    return res


def main(argv: list[str]) -> int:
    if argv[:1] == ["worker"]:
        return worker(argv[1:])
    from overlapscope.lab import TbfShape

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--links", default="0.25,1", help="link rates in Gbit/s, comma-separated")
    ap.add_argument("--collectives", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path("docs/bench/lab-contention.json"))
    args = ap.parse_args(argv)
    rows = []
    for link in (float(v) for v in args.links.split(",")):
        for burst_name, burst in (
            ("for_gbit", TbfShape.for_gbit(link).burst_bytes),
            ("64KiB", 64 * 1024),
        ):
            print(f"link {link:g} Gbit/s, burst {burst_name} ({burst} B) ...", flush=True)
            res = measure(link, burst, args.collectives)
            rows.append({"link_gbit": link, "burst": burst_name, "burst_bytes": burst, **res})
            for phase in ("all_gather", "reduce_scatter"):
                r = res[phase]
                print(
                    f"  {phase:15s} compute median x{r['median_vs_alone']:.2f} "
                    f"mean x{r['mean_vs_alone']:.2f}  softirq {r['softirq_ticks']} ticks  "
                    f"gloo thread {r['gloo_thread_ticks']} ticks  "
                    f"{r['tcp_in_segments']} segments in",
                    flush=True,
                )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    cmd = "python benchmarks/lab_contention.py " + " ".join(argv)
    tmp.write_text(json.dumps({"command": cmd.strip(), "rows": rows}, indent=1) + "\n")
    tmp.replace(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
