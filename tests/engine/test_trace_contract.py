"""The engine's traces, read on their own ranges: overlap is real, memory is bounded, and
every unit's every phase is named by the contract on every rank.

Runs the real CLI (torchrun, 2 gloo ranks) once per configuration for the whole module.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from overlapscope.phases import COMM_PHASES, Phase
from overlapscope.trace.naming.ranges import parse_range
from tests.conftest import make_runs

pytestmark = pytest.mark.multirank

LAYERS = 3
COMMON = [
    "--nproc",
    "2",
    "--model",
    "gpt",
    "--layers",
    str(LAYERS),
    "--dim",
    "128",
    "--heads",
    "4",
    "--seq-len",
    "256",
    "--global-batch",
    "8",
    "--steps",
    "4",
    "--profile-wait",
    "1",
    "--profile-warmup",
    "1",
    "--profile-active",
    "2",
]


@dataclass(frozen=True)
class Interval:
    name: str
    start: float
    end: float
    tid: int

    def overlap(self, other: Interval) -> float:
        return max(0.0, min(self.end, other.end) - max(self.start, other.start))


def load_rank(run: Path, rank: int) -> list[Interval]:
    with gzip.open(run / f"rank-{rank}.pt.trace.json.gz") as f:
        doc = json.loads(f.read())
    assert doc["distributedInfo"]["rank"] == rank
    return sorted(
        (
            Interval(e["name"], e["ts"], e["ts"] + e["dur"], e["tid"])
            for e in doc["traceEvents"]
            if e.get("ph") == "X" and (e["name"].startswith(("ovs/", "gloo:", "ProfilerStep")))
        ),
        key=lambda i: i.start,
    )


def comm_ops(events: list[Interval]) -> list[tuple[Interval, Interval]]:
    """Pair each comm issue range with its transfer: gloo records the engine's first ring
    round (a send and a receive) on the issuing thread, starting inside the issue range; the
    send ends when the whole collective is done (engine/p2p.py)."""
    issues = [e for e in events if (r := parse_range(e.name)) and r.phase in COMM_PHASES]
    p2p = [e for e in events if e.name in ("gloo:send", "gloo:recv")]
    pairs = []
    for i in issues:
        mine = [o for o in p2p if o.tid == i.tid and i.start <= o.start <= i.end]
        sends = sum(o.name == "gloo:send" for o in mine)
        assert sends >= 1 and 2 * sends == len(mine), (i, mine)  # pieces: a send per receive
        span = Interval(i.name, min(o.start for o in mine), max(o.end for o in mine), i.tid)
        pairs.append((i, span))
    assert sum(len([o for o in p2p if i.start <= o.start <= i.end]) for i in issues) == len(p2p)
    return pairs


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    variants = {
        "none": ["--policy", "none"],
        "backward_pre": ["--policy", "backward_pre"],
        "backward_pre_limit1": ["--policy", "backward_pre", "--limit-all-gathers", "1"],
        "backward_pre_limit_default": [
            "--policy",
            "backward_pre",
            "--forward-prefetch",
            "--limit-all-gathers",
        ],
    }
    return make_runs(base, COMMON, variants)


def _bwd_pairs(events: list[Interval]) -> list[tuple[Interval, Interval, Interval]]:
    """Per step: (bwd range of unit i, issue range and gloo op of unit i-1's all-gather)."""
    pairs = []
    ops = comm_ops(events)
    for step in (e for e in events if e.name.startswith("ProfilerStep#")):
        ag_bwd = {
            i.name.split("/")[2]: (i, o)
            for i, o in ops
            if "/ag_bwd/" in i.name and step.start <= i.start < step.end
        }
        for e in events:
            if e.name.startswith("ovs/bwd/blocks.") and step.start <= e.start < step.end:
                i = int(e.name.rsplit(".", 1)[1])
                if i > 0:
                    pairs.append((e, *ag_bwd[f"blocks.{i - 1}"]))
    return pairs


def test_backward_pre_issues_next_all_gather_before_backward(runs: dict[str, Path]) -> None:
    """Unit i-1's all-gather is issued before unit i's gradient compute, every time, on every
    rank: the compute it can hide behind comes after it. (How much of the transfer it hides
    depends on the machine: the policy benchmark in docs/BENCHMARKS.md measures that.)"""
    for rank in (0, 1):
        pairs = _bwd_pairs(load_rank(runs["backward_pre"], rank))
        assert len(pairs) == 2 * (LAYERS - 1)  # two profiled steps
        for bwd, issue, _ag in pairs:
            assert issue.end <= bwd.start, (bwd, issue)


@pytest.mark.parametrize("rank", [0, 1])
def test_ring_sends_and_receives_at_once(runs: dict[str, Path], rank: int) -> None:
    """Every collective posts its first round's send and receive before waiting for either
    (engine/p2p.py), so both directions of the link are in use together: in the trace the two
    are in flight at the same time. A half-duplex exchange (send, wait, then receive) would
    show the receive starting after the send ended."""
    events = load_rank(runs["none"], rank)
    p2p = [e for e in events if e.name in ("gloo:send", "gloo:recv")]
    issues = [e for e in events if (r := parse_range(e.name)) and r.phase in COMM_PHASES]
    assert issues
    for i in issues:
        mine = [o for o in p2p if o.tid == i.tid and i.start <= o.start <= i.end]
        sends = [o for o in mine if o.name == "gloo:send"]
        recvs = [o for o in mine if o.name == "gloo:recv"]
        assert sends and recvs, i
        both = min(max(o.end for o in sends), max(o.end for o in recvs)) - max(
            min(o.start for o in sends), min(o.start for o in recvs)
        )
        assert both > 0, (i, mine)


@pytest.mark.parametrize("rank", [0, 1])
def test_none_does_not_overlap(runs: dict[str, Path], rank: int) -> None:
    pairs = _bwd_pairs(load_rank(runs["none"], rank))
    assert len(pairs) == 2 * (LAYERS - 1)
    for bwd, issue, ag in pairs:
        assert issue.start >= bwd.end, (bwd, issue)  # issued on demand, after
        assert bwd.overlap(ag) == 0, (bwd, ag)


def _manifest(run: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((run / "run.json").read_text())  # type: ignore[no-any-return]


def test_memory_two_units_alive_in_backward_pre_without_limit(runs: dict[str, Path]) -> None:
    assert _manifest(runs["backward_pre"])["max_alive_in_backward"] == [2, 2]
    assert _manifest(runs["none"])["max_alive_in_backward"] == [1, 1]


def test_limiter_caps_alive_units_at_its_window(runs: dict[str, Path]) -> None:
    m1 = _manifest(runs["backward_pre_limit1"])
    assert m1["max_alive_units"] == [1, 1]
    assert min(m1["deferred_prefetches"]) > 0
    m2 = _manifest(runs["backward_pre_limit_default"])
    assert m2["config"]["engine"]["limit_all_gathers"] == 2
    assert max(m2["max_alive_units"]) <= 2


@pytest.mark.parametrize("rank", [0, 1])
def test_limiter_is_visible_in_the_trace(runs: dict[str, Path], rank: int) -> None:
    """With window 1, the prefetch of unit i-1 is issued only after unit i is freed, i.e.
    after its gradient compute; without the limiter it is issued before."""
    for bwd, issue, _ in _bwd_pairs(load_rank(runs["backward_pre_limit1"], rank)):
        assert issue.start >= bwd.end, (bwd, issue)


def _expected_phases() -> set[str]:
    per_block = ["ag_fwd", "ag_fwd.wait", "fwd", "ag_bwd", "ag_bwd.wait", "bwd", "rs", "rs.wait"]
    names = {f"ovs/{p}/blocks.{i}" for p in per_block for i in range(LAYERS)}
    names |= {f"ovs/{p}/root" for p in ["ag_fwd", "ag_fwd.wait", "fwd", "bwd", "rs", "rs.wait"]}
    names.add("ovs/optim/all")
    return names


@pytest.mark.parametrize("variant", ["none", "backward_pre"])
@pytest.mark.parametrize("rank", [0, 1])
def test_every_phase_of_every_unit_on_every_rank(
    runs: dict[str, Path], variant: str, rank: int
) -> None:
    events = load_rank(runs[variant], rank)
    steps = [e for e in events if e.name.startswith("ProfilerStep#")]
    assert len(steps) == 2
    for step in steps:
        inside = {e.name for e in events if step.start <= e.start < step.end}
        missing = _expected_phases() - inside
        assert not missing, f"step {step.name}: missing {sorted(missing)}"
    for e in events:
        if e.name.startswith("ovs/"):
            assert parse_range(e.name) is not None, e.name
    waits = [e for e in events if (r := parse_range(e.name)) and r.phase is Phase.AG_BWD_WAIT]
    assert waits


@pytest.mark.parametrize("variant", ["none", "backward_pre"])
def test_memory_accounting_returns_to_its_level_every_step(
    runs: dict[str, Path], variant: str
) -> None:
    """The profiler counts allocations per thread: a tensor made on the training thread but
    freed on the comm lane's waiter thread would never be subtracted, and the reported peak
    would climb step after step (it did, by one unit's gradient per step, until the lane
    released its references before signalling completion)."""
    for rank in (0, 1):
        with gzip.open(runs[variant] / f"rank-{rank}.pt.trace.json.gz") as f:
            events = json.loads(f.read())["traceEvents"]
        memory = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
        steps = sorted(
            (e for e in events if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"]
        )
        assert len(steps) == 2 and memory
        level = []
        for s in steps:
            inside = [m for m in memory if s["ts"] <= m["ts"] <= s["ts"] + s["dur"]]
            level.append(inside[-1]["args"]["Total Allocated"])
        assert abs(level[1] - level[0]) < 64 * 1024, (rank, level)  # a unit is ~MBs
