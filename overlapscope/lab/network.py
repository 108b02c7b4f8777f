"""The lab network: one namespace per rank, a bridge in a hub namespace, tbf on every port.

Topology for ``num_ranks = 2`` (``N`` ranks add ``N`` ports to the same bridge)::

      ovs<id>r0                    ovs<id>hub                      ovs<id>r1
   +----------------+     +----------------------------+     +----------------+
   | lab0 10.213.0.1|=====|p0 --+                +-- p1|=====|lab0 10.213.0.2 |
   | tbf (r0 sends) |veth |tbf (r0 receives) br0  tbf  |veth | tbf (r1 sends) |
   +----------------+     +----------------------------+     +----------------+

Each rank's ``lab0`` shapes what the rank sends; the hub's port ``p<k>`` shapes what it
delivers to rank ``k``. So every rank sends *and* receives at most ``R``, like a host on a
switch port of ``R``. Nothing is created in the root namespace: the veth pairs are born
inside the namespaces, and deleting the namespaces removes everything. The subnet
``10.213.0.0/24`` exists only inside the lab, so concurrent labs can all use it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from overlapscope.lab import launch
from overlapscope.lab.launch import RankSlot
from overlapscope.lab.netns import (
    NAME_PREFIX,
    check_lab_available,
    delete_namespaces,
    next_seq,
    remove_stale_namespaces,
    run_cmd,
)

SUBNET_PREFIX = "10.213.0"
RANK_IFNAME = "lab0"
BRIDGE = "br0"
MAX_RANKS = 200
# Master port inside the lab. Each lab has its own namespaces, so this never collides.
DEFAULT_MASTER_PORT = 29500
# A GSO super-packet carries up to 64 KiB, and tbf counts it with every segment's headers
# (~69 KB). A packet larger than the burst is split by tbf into 1514-byte frames, which then
# arrive one by one: the receiver's kernel and gloo thread handle each frame separately. With
# the burst at exactly 64 KiB (every rate below 0.26 Gbit/s) that cost 6-20x the kernel and
# gloo-thread CPU per byte and slowed compute on the same cores up to 2.5x (docs/LAB.md).
MIN_BURST_BYTES = 96 * 1024
# Above this rate the burst grows to 0.5 ms of tokens so the kernel timer cannot starve the
# bucket; up to it (1.57 Gbit/s) the burst is MIN_BURST_BYTES at every rate.
BURST_S = 0.0005


@dataclass(frozen=True, slots=True)
class TbfShape:
    """Parameters of one ``tbf`` qdisc.

    ``rate_bit_s``: the shaped rate (tbf counts whole Ethernet frames, so TCP payload gets
    ~95.6% of it at MTU 1500: 1448 payload bytes per 1514-byte frame).
    ``burst_bytes``: the token bucket. ``MIN_BURST_BYTES`` so one full GSO super-packet
    passes whole, the same at every rate up to 1.57 Gbit/s (0.5 ms of tokens above that).
    The credit a transfer gets after an idle gap is then the same bytes at every rate, so a
    transfer's time scales with ``1 / rate`` (what-if's link-rate scaling relies on it).
    With a burst in *time* (the 2 ms this used to be) a 1 Gbit/s link gave 250 KB of credit
    and a 0.25 Gbit/s link 96 KiB, and the what-if sweeps' transfers (1.1-1.6 MB each way)
    measured 1.05-1.10x the rate at 1 Gbit/s but 0.99-1.00x at 0.25. Against a 1 MiB
    message the credit is at most a few percent.
    ``latency_ms``: how long a packet may wait in the queue (sets the queue limit to
    ``rate * latency + burst``): 20 ms is deep enough that TCP meets back-pressure rather
    than drops at these rates, short enough not to add seconds of bufferbloat.
    """

    rate_bit_s: int
    burst_bytes: int
    latency_ms: float

    def __post_init__(self) -> None:
        if self.rate_bit_s <= 0:
            raise ValueError(f"TbfShape.rate_bit_s must be > 0, got {self.rate_bit_s}")
        if self.burst_bytes < 1514:
            raise ValueError(f"TbfShape.burst_bytes must hold one frame (>= 1514), got {self}")

    @classmethod
    def for_gbit(cls, link_gbit: float) -> TbfShape:
        if not link_gbit > 0:
            raise ValueError(f"link_gbit must be > 0, got {link_gbit}")
        rate = round(link_gbit * 1e9)
        burst = max(MIN_BURST_BYTES, round(rate / 8 * BURST_S))
        return cls(rate_bit_s=rate, burst_bytes=burst, latency_ms=20.0)

    def tc_args(self) -> list[str]:
        return [
            "tbf",
            "rate",
            f"{self.rate_bit_s}bit",
            "burst",
            f"{self.burst_bytes}b",
            "latency",
            f"{self.latency_ms:g}ms",
        ]


@dataclass(slots=True)
class Lab:
    """A live lab network; only valid inside :func:`shaped_network`."""

    slots: list[RankSlot]
    hub_netns: str
    shape: TbfShape | None
    master_port: int = DEFAULT_MASTER_PORT
    namespaces: list[str] = field(default_factory=list)

    @property
    def master_addr(self) -> str:
        return self.slots[0].addr

    def run_ranks(
        self,
        argv_for_rank: Callable[[RankSlot], list[str]],
        env: Mapping[str, str],
        log_dir: Path,
        timeout_s: float | None = None,
        *,
        on_rank0_line: Callable[[str], None] | None = None,
    ) -> list[int]:
        """Start one process per rank inside its namespace; wait; return exit codes.

        Each process gets ``os.environ`` overlaid with ``env`` and ``GLOO_SOCKET_IFNAME``
        (gloo in a namespace hangs at connect without it). Rank ``k`` writes to
        ``log_dir/rank-k.log``; rank 0's lines are also passed to ``on_rank0_line`` (default:
        echoed to our stdout) as they arrive. When one rank exits non-zero, or ``timeout_s``
        passes, the others get SIGTERM and, after a grace period, SIGKILL; a killed rank's
        code is ``-signal``.
        """
        return launch.run_in_namespaces(
            self.slots, argv_for_rank, env, log_dir, timeout_s, on_rank0_line
        )


_BLOCKED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _raise_system_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def _signals_raise() -> Iterator[None]:
    """Make SIGTERM/SIGHUP raise ``SystemExit`` (so ``finally`` runs) while the lab exists."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _raise_system_exit) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextmanager
def _signals_blocked() -> Iterator[None]:
    """Defer SIGINT/SIGTERM/SIGHUP while namespaces are built or torn down (~100 ms)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _BLOCKED)


def _build(lab: Lab) -> None:
    """Create namespaces, bridge, veth pairs, addresses and qdiscs (records names first)."""
    hub = lab.hub_netns
    lab.namespaces.append(hub)
    run_cmd(["ip", "netns", "add", hub])
    run_cmd(["ip", "-n", hub, "link", "add", BRIDGE, "type", "bridge"])
    run_cmd(["ip", "-n", hub, "link", "set", BRIDGE, "up"])
    for slot in lab.slots:
        port = f"p{slot.rank}"
        lab.namespaces.append(slot.netns)
        run_cmd(["ip", "netns", "add", slot.netns])
        run_cmd(["ip", "-n", slot.netns, "link", "set", "lo", "up"])
        run_cmd(
            [
                "ip",
                "-n",
                hub,
                "link",
                "add",
                port,
                "type",
                "veth",
                "peer",
                "name",
                slot.ifname,
                "netns",
                slot.netns,
            ]
        )
        run_cmd(["ip", "-n", hub, "link", "set", port, "master", BRIDGE, "up"])
        run_cmd(["ip", "-n", slot.netns, "addr", "add", f"{slot.addr}/24", "dev", slot.ifname])
        run_cmd(["ip", "-n", slot.netns, "link", "set", slot.ifname, "up"])
        if lab.shape is not None:
            tbf = lab.shape.tc_args()
            # rank -> switch: caps what the rank sends
            run_cmd(["tc", "-n", slot.netns, "qdisc", "add", "dev", slot.ifname, "root", *tbf])
            # switch -> rank: caps what the rank receives
            run_cmd(["tc", "-n", hub, "qdisc", "add", "dev", port, "root", *tbf])


@contextmanager
def shaped_network(
    num_ranks: int, link_gbit: float | None, *, shape: TbfShape | None = None
) -> Iterator[Lab]:
    """Build a lab of ``num_ranks`` namespaces joined at ``link_gbit`` (``None``: unshaped).

    ``shape`` overrides ``TbfShape.for_gbit(link_gbit)`` (experiments on the shaper itself).

    Always tears the lab down: on normal exit, on an exception in the body, on Ctrl-C, and on
    SIGTERM/SIGHUP (turned into ``SystemExit`` while the lab is up). Raises
    :class:`~overlapscope.errors.UserError` if the lab cannot run here.
    """
    if not 1 <= num_ranks <= MAX_RANKS:
        raise ValueError(f"num_ranks must be in 1..{MAX_RANKS}, got {num_ranks}")
    if shape is None and link_gbit is not None:
        shape = TbfShape.for_gbit(link_gbit)
    check_lab_available()
    remove_stale_namespaces()
    base = f"{NAME_PREFIX}{os.getpid()}x{next_seq()}"
    slots = [
        RankSlot(rank=k, netns=f"{base}r{k}", ifname=RANK_IFNAME, addr=f"{SUBNET_PREFIX}.{k + 1}")
        for k in range(num_ranks)
    ]
    lab = Lab(slots=slots, hub_netns=f"{base}hub", shape=shape)
    with _signals_raise():
        try:
            with _signals_blocked():
                _build(lab)
            yield lab
        finally:
            with _signals_blocked():
                delete_namespaces(lab.namespaces)
