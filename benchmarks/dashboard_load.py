"""The dashboard under load: clients that behave as browsers (``tests/dashboard/load.py``)
switching runs, views and steps, against each WSGI server.

    python benchmarks/dashboard_load.py [--clients 20] [--seconds 60] [--server waitress werkzeug]

Each server in a fresh process (``--serve NAME``) on the app ``overlapscope dashboard`` makes
of the same runs (analysed before it listens, from a cache of this benchmark's own, warmed by
the first server), on loopback: ``waitress`` (what ``overlapscope dashboard`` serves with,
``commands/dashboard.py``) and ``werkzeug`` (the development server, one thread per request,
as it served before). Prints a Markdown table per server: requests, statuses, requests per
CPU second of the server (steadier than latency on a shared machine), latency p50 / p95 per
kind of request (ms), and the server's resident memory (MB) at the end of the first third and
at the end.
"""

from __future__ import annotations

import argparse
import collections
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.dashboard.load import Load, run_load  # noqa: E402

RUNS = [
    "traces/backward_pre",
    "traces/none",
    "traces/backward_post",
    "traces/gpu-engine-nccl-backward_pre",
    "traces/gpu-torch-fsdp2-default",
]


def serve(name: str, port: int, paths: list[str]) -> None:
    """The command's app on ``port``, served by ``name``."""
    from dashboards import create_app, discover_runs
    from overlapscope.commands.dashboard import bind_port, serve_waitress, warm

    runs = discover_runs([Path(p) for p in paths])
    app = create_app(runs)
    warm(app, runs, False)
    sock = bind_port("127.0.0.1", port)
    print(f"serving on {port}", flush=True)
    if name == "waitress":
        serve_waitress(app, sock)
        return
    from werkzeug.serving import make_server

    make_server("127.0.0.1", port, app.server, threaded=True, fd=sock.fileno()).serve_forever()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` and its threads so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(name: str, clients: int, seconds: float, cache: str) -> tuple[Load, float]:
    """The load on a fresh server ``name``, and the CPU seconds the server spent under it."""
    port = _port()
    env = {**os.environ, "OVERLAPSCOPE_CACHE": cache}
    cmd = [sys.executable, __file__, "--serve", name, "--port", str(port)]
    server = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and "serving" in server.stdout.readline()
        base = f"http://127.0.0.1:{port}"
        before = cpu_seconds(server.pid)
        load = run_load(base, server.pid, clients=clients, seconds=seconds, max_requests=100_000)
        return load, cpu_seconds(server.pid) - before
    finally:
        server.terminate()
        server.wait(timeout=60)


def _ms(values: list[float], q: float) -> str:
    ordered = sorted(values)
    return f"{1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:,.0f}"


def table(name: str, load: Load, cpu_s: float, seconds: float) -> str:
    statuses = collections.Counter(s.status for s in load.samples)
    kinds: dict[str, list[float]] = collections.defaultdict(list)
    for s in load.samples:
        kinds["every request"].append(s.seconds)
        kinds[s.what].append(s.seconds)
    third = [mb for t, mb in load.rss_mb if t <= seconds / 3]
    lines = [
        f"**{name}**: {len(load.samples):,} requests, statuses {dict(sorted(statuses.items()))}, "
        f"{len(load.samples) / cpu_s:.1f} requests per CPU second of the server; "
        f"server memory {third[-1]:.0f} MB at {seconds / 3:.0f} s, {load.rss_mb[-1][1]:.0f} MB at "
        f"the end (max {max(mb for _, mb in load.rss_mb):.0f})",
        "",
        "| request | n | p50 ms | p95 ms |",
        "|---|---|---|---|",
    ]
    for kind, values in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"| {kind} | {len(values):,} | {_ms(values, 0.5)} | {_ms(values, 0.95)} |")
    errors = collections.Counter(f"{s.what}: {s.error}" for s in load.samples if s.status == 0)
    lines += [f"\nno answer, {n}x: {e}" for e, n in errors.most_common()]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--server", nargs="+", default=["waitress", "werkzeug"])
    p.add_argument("--serve", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve, args.port, RUNS)
        return
    with tempfile.TemporaryDirectory(prefix="dashboard-load-") as cache:
        for name in args.server:
            load, cpu_s = measure(name, args.clients, args.seconds, cache)
            print(table(name, load, cpu_s, args.seconds) + "\n", flush=True)


if __name__ == "__main__":
    main()
