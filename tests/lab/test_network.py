"""The lab network itself: topology, shaping, and teardown in every way a run can end."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from overlapscope.lab import TbfShape, shaped_network
from overlapscope.lab.netns import list_links, list_namespaces, run_cmd
from tests.lab.support import assert_torn_down, needs_lab, root_state

pytestmark = [pytest.mark.root, needs_lab]

REPO = Path(__file__).resolve().parents[2]


def _qdiscs(netns: str, dev: str) -> list[dict[str, Any]]:
    out = run_cmd(["tc", "-n", netns, "-j", "qdisc", "show", "dev", dev])
    return list(json.loads(out))


@pytest.mark.parametrize("num_ranks", [2, 4], ids=["2-ranks", "4-ranks"])
def test_topology_and_shaping(num_ranks: int) -> None:
    before = root_state()
    with shaped_network(num_ranks, 0.3) as lab:
        assert [s.rank for s in lab.slots] == list(range(num_ranks))
        assert len({s.netns for s in lab.slots}) == num_ranks
        assert lab.master_addr == lab.slots[0].addr
        expected_rate = TbfShape.for_gbit(0.3).rate_bit_s
        for slot in lab.slots:
            assert slot.netns in list_namespaces()
            addrs = run_cmd(["ip", "-n", slot.netns, "-o", "addr", "show", "dev", slot.ifname])
            assert f"{slot.addr}/24" in addrs
            lo = run_cmd(["ip", "-n", slot.netns, "link", "show", "lo"])
            assert "UP" in lo.split(">")[0]
            # send side (rank's own veth) and receive side (its hub port) are both shaped
            for netns, dev in ((slot.netns, slot.ifname), (lab.hub_netns, f"p{slot.rank}")):
                (q,) = _qdiscs(netns, dev)
                assert q["kind"] == "tbf"
                assert int(q["options"]["rate"]) * 8 == expected_rate  # tc -j reports bytes/s
        # The subnet exists only inside the lab: no root-namespace link was added.
        assert set(list_links()) == before[1]
    assert_torn_down(before, lab.namespaces)


def test_unshaped_has_no_tbf() -> None:
    before = root_state()
    with shaped_network(2, None) as lab:
        for slot in lab.slots:
            assert all(q["kind"] != "tbf" for q in _qdiscs(slot.netns, slot.ifname))
    assert_torn_down(before, lab.namespaces)


_SINK = """
import socket
def in_segs():  # TCP segments this namespace received, after the kernel merged them (GRO)
    rows = [line.split() for line in open("/proc/self/net/snmp") if line.startswith("Tcp:")]
    return int(rows[1][rows[0].index("InSegs")])
srv = socket.create_server(("0.0.0.0", 29600))
conn, _ = srv.accept()
got, segs = 0, in_segs()
while chunk := conn.recv(1 << 16):
    got += len(chunk)
print("received", got, "in", in_segs() - segs, "segments", flush=True)
"""
_SOURCE = """
import socket, sys, time
for _ in range(100):
    try:
        s = socket.create_connection((sys.argv[1], 29600))
        break
    except OSError:
        time.sleep(0.05)
s.sendall(bytes(4 << 20))
s.close()
"""


@pytest.mark.parametrize(
    ("burst_bytes", "split"),
    [(None, False), (64 * 1024, True)],
    ids=["for_gbit", "old-64KiB-burst"],
)
def test_gso_super_packets_pass_tbf_whole(
    tmp_path: Path, burst_bytes: int | None, split: bool
) -> None:
    """Below 0.26 Gbit/s the burst used to be exactly 64 KiB: tbf split every GSO
    super-packet into 1514-byte frames (~16x the receive CPU per byte, docs/LAB.md). Count
    the segments the receiver's TCP saw: super-packets arrive merged (tens of KB each), split
    frames at a few KB at most (1448 bytes each, some merged)."""
    shape = TbfShape.for_gbit(0.2)
    if burst_bytes is not None:
        shape = TbfShape(shape.rate_bit_s, burst_bytes, shape.latency_ms)
    with shaped_network(2, 0.2, shape=shape) as lab:
        addr = lab.slots[1].addr
        argv = {0: [sys.executable, "-c", _SOURCE, addr], 1: [sys.executable, "-c", _SINK]}
        codes = lab.run_ranks(lambda slot: argv[slot.rank], {}, tmp_path, timeout_s=60)
        assert codes == [0, 0]
    log = (tmp_path / "rank-1.log").read_text()
    m = re.search(r"received (\d+) in (\d+) segments", log)
    assert m is not None, log
    assert int(m[1]) == 4 << 20
    mean_segment = int(m[1]) / int(m[2])
    assert (mean_segment < 16_000) == split, f"mean received segment: {mean_segment:.0f} bytes"


def test_teardown_after_exception_in_body() -> None:
    before = root_state()
    with pytest.raises(RuntimeError, match="boom"), shaped_network(2, 0.5) as lab:
        assert set(lab.namespaces) <= set(list_namespaces())
        raise RuntimeError("boom")
    assert_torn_down(before, lab.namespaces)


def test_teardown_after_rank_failure_stops_peer_promptly(tmp_path: Path) -> None:
    """Rank 1 dies at once; rank 0 would wait an hour for it. The lab stops rank 0 because
    its peer failed (not at the run's timeout) and cleans up."""
    before = root_state()
    argv = {
        0: [sys.executable, "-c", "import time; print('waiting', flush=True); time.sleep(3600)"],
        1: [sys.executable, "-c", "import sys; sys.exit(3)"],
    }
    timeout_s = 600.0
    t0 = time.monotonic()
    with shaped_network(2, 0.5) as lab:
        codes = lab.run_ranks(lambda slot: argv[slot.rank], {}, tmp_path, timeout_s=timeout_s)
    elapsed = time.monotonic() - t0
    assert codes == [-signal.SIGTERM, 3]
    # A hang guard, not a speed bar: stopped by the peer's failure, long before the timeout.
    assert elapsed < timeout_s / 2, f"peer not stopped on failure ({elapsed:.1f} s)"
    assert "waiting" in (tmp_path / "rank-0.log").read_text()
    assert_torn_down(before, lab.namespaces)


def test_timeout_stops_ranks(tmp_path: Path) -> None:
    before = root_state()
    with shaped_network(2, None) as lab:
        codes = lab.run_ranks(
            lambda slot: [sys.executable, "-c", "import time; time.sleep(120)"],
            {},
            tmp_path,
            timeout_s=1.0,
        )
    assert codes == [-signal.SIGTERM, -signal.SIGTERM]
    assert_torn_down(before, lab.namespaces)


def test_teardown_on_sigterm_while_ranks_run(tmp_path: Path) -> None:
    """SIGTERM to a process whose ranks are running: ranks stopped, lab deleted."""
    before = root_state()
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from overlapscope.lab import shaped_network\n"
        "with shaped_network(2, 0.5) as lab:\n"
        "    print(' '.join(lab.namespaces), flush=True)\n"
        "    rank = [sys.executable, '-c', "
        "'import os, time; print(os.getpid(), flush=True); time.sleep(120)']\n"
        f"    lab.run_ranks(lambda slot: rank, {{}}, Path({str(tmp_path)!r}))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    names = proc.stdout.readline().split()
    assert names and set(names) <= set(list_namespaces())
    rank0_pid = int(proc.stdout.readline())  # rank 0 is running inside its namespace
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 128 + signal.SIGTERM
    with pytest.raises(ProcessLookupError):
        os.kill(rank0_pid, 0)
    assert_torn_down(before, names)


def test_stale_namespaces_of_dead_processes_are_removed() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"ovs{dead.pid}x0r0"
    run_cmd(["ip", "netns", "add", stale])
    try:
        with shaped_network(2, None):
            assert stale not in list_namespaces()
    finally:
        if stale in list_namespaces():
            run_cmd(["ip", "netns", "delete", stale])
