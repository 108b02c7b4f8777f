"""The flight report of real dumps from real gloo runs (tests/flight/conftest.py): matching
across 2 and 4 ranks, the join to a profiler trace's units, the late issuer of a slowed
rank, the hang of a rank that stopped, and the clocks."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from overlapscope.analysis.findings import FindingKind
from overlapscope.flight.api import FlightReport, analyze_dumps, num_steps
from overlapscope.flight.discover import find_dumps
from overlapscope.flight.findings import MIN_STEPS
from tests.flight.helpers import Entry, load_entries, rewrite


def report(run: Path, **kw: object) -> FlightReport:
    dumps, _ = find_dumps([run])
    return analyze_dumps(dumps, **kw)  # type: ignore[arg-type]


def test_two_ranks_every_collective_is_matched(fsdp2_profiled: Path) -> None:
    r = report(fsdp2_profiled)
    c = r.collectives
    assert len(c) == len(load_entries(fsdp2_profiled)[0])
    assert (c["num_ranks"] == 2).all() and c["never_issued_by"].isna().all()
    assert c["mismatch"].isna().all()
    assert set(c["last_rank"].dropna()) <= {0, 1} and (c["lag_us"].dropna() >= 0).all()
    assert r.clocks.basis == "issues" and "issue times" in r.clocks.note
    assert num_steps(c) == 4  # the run's 4 steps, each begun by its first all-gather


def test_four_ranks_of_fsdp1_match_with_their_phases(fsdp1_four: Path) -> None:
    r = report(fsdp1_four)
    c = r.collectives
    assert sorted(r.entries["rank"].unique()) == [0, 1, 2, 3]
    assert (c["num_ranks"] == 4).all()
    fsdp = c[c["framework"] == "fsdp1"]
    assert set(fsdp["phase"]) == {"ag_fwd", "ag_bwd", "rs"}
    # 3 units: each step gathers each unit once in forward and reduces each once
    per_step = fsdp[fsdp["step"] == 1].groupby("phase").size()
    assert per_step["ag_fwd"] == 3 and per_step["rs"] == 3


def test_a_size_the_ranks_disagree_on_is_named(fsdp2_profiled: Path, tmp_path: Path) -> None:
    def edit(rank: int, e: Entry) -> None:
        if rank == 1 and e["collective_seq_id"] == 5:
            e["input_sizes"] = [[2079]]

    r = report(rewrite(fsdp2_profiled, tmp_path / "run", edit))
    bad = r.collectives[r.collectives["mismatch"].notna()]
    assert list(bad["seq_id"]) == [5]
    assert bad["mismatch"].iloc[0] == "input_sizes: rank 0 [[2080]], rank 1 [[2079]]"


def test_the_profiler_trace_beside_names_the_units(fsdp2_profiled: Path) -> None:
    """The trace holds steps 1-3 (step 0 is its warm-up): those collectives take its units,
    each slot of a phase one unit in every step; step 0's take their slot's unit; what has
    no phase (the run's last all-reduce and barrier) stays null."""
    from overlapscope.analysis.api import analyze
    from overlapscope.trace.run.loader import load_run

    traces = analyze(load_run([fsdp2_profiled], progress=False))
    r = report(fsdp2_profiled, trace_collectives=traces.collectives)
    c = r.collectives[r.collectives["phase"].notna()]
    assert r.collectives.loc[r.collectives["phase"].isna(), "unit"].isna().all()
    assert list(c.loc[(c["step"] == 0) & (c["phase"] == "ag_fwd"), "unit"]) == ["0", "1", "2"]
    later = c[c["step"] >= 1]
    assert later["unit"].notna().all(), r.join_note
    units = later.groupby(["phase", "slot"])["unit"].unique()
    assert all(len(u) == 1 for u in units)
    assert [units[("ag_fwd", k)][0] for k in range(3)] == ["0", "1", "2"]
    assert units[("ag_bwd", 0)][0] == "2"  # backward gathers the last unit first
    assert "joined to the profiler trace" in r.join_note
    assert "9 more outside the trace's steps take the unit of their slot" in r.join_note


def test_the_slowed_rank_is_the_late_issuer_over_many_steps(slow_rank: Path) -> None:
    r = report(slow_rank)
    late = [f for f in r.findings if f.kind is FindingKind.STRAGGLER]
    assert late and late[0].rank == 1, [f.title for f in r.findings]
    assert "forward all-gather" in late[0].title
    n = int(late[0].summary.split("last to issue it on ")[1].split(" of ")[0])
    assert n >= MIN_STEPS
    assert "foreach_all_gather" in late[0].summary  # the stack that issued it


def test_the_stopped_rank_is_a_hang_with_its_last_entry(hang: Path) -> None:
    entries = load_entries(hang)
    last = entries[0][-1]["collective_seq_id"]
    assert entries[1][-1]["collective_seq_id"] == last - 1  # rank 1 never issued the last
    r = report(hang)
    hangs = [f for f in r.findings if f.kind is FindingKind.COLLECTIVE_HANG]
    assert len(hangs) == 1 and r.findings[0] is hangs[0]
    f = hangs[0]
    assert f.rank == 1 and f.title.startswith(f"collective {last} of group 0")
    # the last each rank completed, as its pg_status says (rank 1's last reduce-scatter may
    # still be in flight when it dumps: last - 1 or last - 2)
    done = {r: _status(hang, r)["0"]["last_completed_collective"] for r in (0, 1)}
    assert done[1] in (last - 1, last - 2)
    assert f"rank 0 {done[0]}, rank 1 {done[1]}" in f.summary
    assert "_last_step (flight/gloo_run.py" in f.summary  # where rank 1 stopped


def _status(run: Path, rank: int) -> dict[str, dict[str, int]]:
    import pickle

    doc = pickle.loads((run / "comm_traces" / f"rank_{rank}").read_bytes())
    return {k: {n: int(v) for n, v in st.items()} for k, st in doc["pg_status"].items()}


def test_clocks_moved_by_seconds_are_put_back(slow_rank: Path, tmp_path: Path) -> None:
    """Rank 1's clock 5 s ahead (as on another host): the issue-time rule recovers the
    offset and the late issuer is still rank 1; kept as recorded, rank 1 is last always."""
    shift_ns = 5_000_000_000

    def edit(rank: int, e: Entry) -> None:
        if rank == 1:
            e["time_created_ns"] += shift_ns

    moved = rewrite(slow_rank, tmp_path / "run", edit)
    r = report(moved)
    off = r.clocks.offsets.set_index("rank")["offset_us"]
    assert abs(off[1] - shift_ns / 1e3) < 5_000.0
    assert [f.rank for f in r.findings if f.kind is FindingKind.STRAGGLER][:1] == [1]
    kept = report(moved, align=False)
    assert (kept.collectives["last_rank"].dropna() == 1).all()
    assert "not applied: --no-align" in kept.clocks.note


def test_with_timing_peer_waits_follow_and_completions_align(
    slow_rank: Path, tmp_path: Path
) -> None:
    """The slowed run's dumps with NCCL-style timing added (each collective completes 200 µs
    after its last rank issued it): the other rank's wait is the peer wait, the clocks are
    aligned on completions."""
    issued = load_entries(slow_rank)
    last = {
        e["collective_seq_id"]: max(issued[r][i]["time_created_ns"] for r in issued)
        for i, e in enumerate(issued[0])
    }

    def edit(rank: int, e: Entry) -> None:
        done = last[e["collective_seq_id"]] + 200_000
        e["time_discovered_started_ns"] = e["time_created_ns"]
        e["time_discovered_completed_ns"] = done
        e["duration_ms"] = (done - e["time_created_ns"]) / 1e6

    r = report(rewrite(slow_rank, tmp_path / "run", edit))
    assert r.clocks.basis == "completions"
    waits = [f for f in r.findings if f.kind is FindingKind.PEER_WAIT]
    assert waits and waits[0].rank == 0 and "forward all-gather" in waits[0].title
    pw = r.ranks.groupby("rank")["peer_wait_us"].sum()
    assert pw[0] > pw[1] and np.isfinite(pw).all()


def test_a_wrapped_ring_buffer_is_out_of_window_not_missing(tmp_path: Path) -> None:
    """The hang run with a 20-entry ring buffer: rank 1 dumped before the last collective,
    so its window starts one collective earlier than rank 0's; that collective is out of
    rank 0's window (not a hang), and the last one is still rank 1's hang."""
    from tests.flight.conftest import make_run

    run = make_run(tmp_path / "hang20", "fsdp2", "--hang-rank", "1", "--buffer", "20")
    entries = load_entries(run)
    assert len(entries[0]) == len(entries[1]) == 20  # both buffers wrapped
    first0, first1 = entries[0][0]["collective_seq_id"], entries[1][0]["collective_seq_id"]
    assert first1 == first0 - 1
    r = report(run)
    c = r.collectives.set_index("seq_id")
    assert c.loc[first1, "out_of_window"] == "0" and c.loc[first1, "never_issued_by"] is None
    last = entries[0][-1]["collective_seq_id"]
    assert c.loc[last, "never_issued_by"] == "1"
    assert any("older than some rank's ring buffer keeps" in w for w in r.warnings)
    assert [f.kind for f in r.findings][:1] == [FindingKind.COLLECTIVE_HANG]
