"""Is the lab link full duplex on one TCP connection? (a benchmark: it measures a rate)

    python benchmarks/lab_duplex.py [--link-gbit 0.2] [--size-mb 4] [--exchanges 6]
                                    [--json docs/bench/lab-duplex.json]

Two ranks in the lab exchange ``SIZE`` bytes each way at the same time over a single TCP
connection (one thread sends, one receives), like a 2-rank ring all-gather moves its halves.
Over the shaped link both directions must run at the link rate together: the ACKs of one
direction sharing the tbf FIFO with the other direction's data must not slow it down.

It reports each rank's goodput per direction for every exchange and for the fastest one: on
two shared cores a rank that is not scheduled only ever adds time, while nothing can make the
shaped link beat its rate, so the fastest exchange is what the link carries. A half-duplex
link (both directions sharing one rate) reads ~0.5 of the rate. Needs root and iproute2.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from overlapscope.lab import shaped_network

PORT = 29777

# argv: rank, peer address, bytes each way, timed exchanges, port. Prints one "seconds" line
# per timed exchange.
EXCHANGE = """
import socket, sys, threading, time
rank, peer, n, timed = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
PORT = int(sys.argv[5])
if rank == 0:
    srv = socket.create_server(("0.0.0.0", PORT))
    s, _ = srv.accept()
else:
    for _ in range(200):
        try:
            s = socket.create_connection((peer, PORT))
            break
        except OSError:
            time.sleep(0.05)
def receive():
    got, b = 0, bytearray(1 << 20)
    while got < n:
        got += s.recv_into(b, min(len(b), n - got))
payload = bytes(n)
for i in range(timed + 1):
    s.sendall(b"x")
    assert s.recv(1) == b"x"  # barrier
    t0 = time.perf_counter()
    th = threading.Thread(target=receive)
    th.start()
    s.sendall(payload)
    th.join()
    if i:  # the first exchange warms the connection up
        print(time.perf_counter() - t0, flush=True)
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    p.add_argument("--link-gbit", type=float, default=0.2)
    p.add_argument("--size-mb", type=float, default=4.0, help="MiB each way per exchange")
    p.add_argument("--exchanges", type=int, default=6, help="timed, after one warm-up")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    size = int(args.size_mb * 2**20)
    with tempfile.TemporaryDirectory() as tmp, shaped_network(2, args.link_gbit) as lab:
        argv = [str(size), str(args.exchanges), str(PORT)]
        codes = lab.run_ranks(
            lambda slot: [sys.executable, "-c", EXCHANGE, str(slot.rank), lab.master_addr, *argv],
            {},
            Path(tmp),
            300,
            on_rank0_line=lambda line: None,
        )
        if codes != [0, 0]:
            print(f"exchange failed: exit codes {codes}", file=sys.stderr)
            return 1
        times = {r: [float(x) for x in (Path(tmp) / f"rank-{r}.log").read_text().split()]
                 for r in (0, 1)}  # fmt: skip
    result = {
        "command": " ".join(["python", "benchmarks/lab_duplex.py", *sys.argv[1:]]),
        "link_gbit": args.link_gbit,
        "size_bytes_each_way": size,
        "ranks": {
            str(r): {
                "seconds": t,
                "goodput_gbit_per_direction": [size * 8 / x / 1e9 for x in t],
                "fastest_over_link": size * 8 / min(t) / 1e9 / args.link_gbit,
            }
            for r, t in times.items()
        },
    }
    for r, row in result["ranks"].items():
        print(
            f"rank {r}: fastest exchange {row['fastest_over_link']:.1%} of the link per direction"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
