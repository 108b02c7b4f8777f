"""The critical path across ranks: known answers on hand-built steps, and invariants on real
runs (the links tile the step)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from overlapscope.analysis.api import analyze
from overlapscope.analysis.clocks.alignment import align
from overlapscope.analysis.critical_path.path import critical_path
from overlapscope.analysis.critical_path.report import path_paragraph
from overlapscope.analysis.findings import FindingInput, FindingKind
from overlapscope.analysis.findings import critical_path as path_rule
from overlapscope.analysis.segments import segments
from overlapscope.trace.recognize.table import ComputeSource
from overlapscope.trace.run.loader import RankInfo, RunTraces, load_run
from tests.clocks.conftest import table
from tests.conftest import REPO


def step(rank: int, ts: float, dur: float, n: int = 0) -> dict[str, object]:
    return {"rank": rank, "step": n, "lane": "step", "ts": ts, "dur": dur}


def work(rank: int, ts: float, dur: float, unit: str, n: int = 0) -> dict[str, object]:
    return {
        "rank": rank,
        "step": n,
        "lane": "compute",
        "ts": ts,
        "dur": dur,
        "unit": unit,
        "phase": "fwd",
    }


def coll(rank: int, ts: float, dur: float, seq: int, n: int = 0) -> dict[str, object]:
    return {
        "rank": rank,
        "step": n,
        "lane": "comm",
        "ts": ts,
        "dur": dur,
        "unit": f"u{seq}",
        "phase": "ag_fwd",
        "kind": "all_gather",
        "group": "g",
        "seq": seq,
    }


def two_ranks(b1_dur: float, n: int = 0, t0: float = 0.0) -> list[dict[str, object]]:
    """rank 1 computes A longer (180 vs 100): rank 0 waits for it in the all-gather X."""
    return [
        step(0, t0, 400, n), work(0, t0, 100, "A", n), coll(0, t0 + 100, 200, 0, n),
        work(0, t0 + 300, 100, "B", n),
        step(1, t0, 300 + b1_dur, n), work(1, t0, 180, "A", n), coll(1, t0 + 180, 120, 0, n),
        work(1, t0 + 300, b1_dur, "B", n),
    ]  # fmt: skip


def test_segments_tile_the_window_by_priority() -> None:
    ev = table([work(0, 0, 100, "A"), coll(0, 50, 100, 0), work(0, 120, 10, "B")])
    seg = segments(ev, (0.0, 200.0))
    assert list(seg["kind"]) == ["compute", "comm", "compute", "comm", "idle"]
    assert list(seg["start_us"]) == [0, 100, 120, 130, 150]
    assert list(seg["end_us"]) == [100, 120, 130, 150, 200]


def test_known_path_follows_the_last_rank() -> None:
    path = critical_path(table(two_ranks(b1_dur=50)))
    links = path.links
    got = list(zip(links["rank"], links["kind"], links["unit"], links["dur_us"], strict=True))
    # latest first: rank 0's B, the transfer after rank 1 arrived, rank 1's long A
    assert got == [(0, "compute", "B", 100.0), (0, "comm", "u0", 120.0), (1, "compute", "A", 180.0)]
    s = path.steps.iloc[0]
    assert s["step_us"] == s["path_us"] == 400.0
    assert (s["compute_us"], s["comm_us"], s["num_hops"]) == (280.0, 120.0, 1)


def test_whatif_is_replayed_not_subtracted() -> None:
    # rank 1's B (95) is nearly as long as rank 0's (100): shortening rank 0's B by 10 µs only
    # wins 5 µs, since rank 1's B then sets the step.
    path = critical_path(table(two_ranks(b1_dur=95)))
    keys = zip(path.links["rank"], path.links["unit"], strict=True)
    saving = dict(zip(keys, path.links["saving_us"], strict=True))
    assert saving[(0, "B")] == pytest.approx(5.0)
    assert saving[(1, "A")] == pytest.approx(18.0)  # 180 -> 162 moves the transfer 18 earlier
    assert saving[(0, "u0")] == pytest.approx(12.0)  # the collective 10% shorter on every rank


def test_three_ranks_path_crosses_twice() -> None:
    rows = [
        step(0, 0, 500), work(0, 0, 50, "A"), coll(0, 50, 150, 0), work(0, 200, 50, "B"),
        coll(0, 250, 250, 1),
        step(1, 0, 500), work(1, 0, 150, "A"), coll(1, 150, 50, 0), work(1, 200, 50, "B"),
        coll(1, 250, 250, 1),
        step(2, 0, 500), work(2, 0, 60, "A"), coll(2, 60, 140, 0), work(2, 200, 200, "B"),
        coll(2, 400, 100, 1),
    ]  # fmt: skip
    links = critical_path(table(rows)).links
    assert list(zip(links["rank"], links["kind"], links["unit"], strict=True)) == [
        (0, "comm", "u1"), (2, "compute", "B"), (2, "comm", "u0"), (1, "compute", "A"),
    ]  # fmt: skip
    assert links["dur_us"].sum() == 500.0


def test_path_finding_names_rank_and_unit() -> None:
    rows = two_ranks(b1_dur=50, n=0) + two_ranks(b1_dur=50, n=1, t0=400)
    path = critical_path(table(rows))
    ranks = pd.DataFrame({"rank": [0, 1], "num_steps": [2, 2], "step_time_per_step_us": 400.0})
    empty = pd.DataFrame()
    (f,) = path_rule.find(FindingInput(ranks, empty, empty, empty, empty, path=path))
    assert f.title == "rank 1's forward of A is on the critical path in 2 of 2 steps"
    assert f.rank == 1 and f.stake_us == pytest.approx(18.0)
    assert "rank 1's forward of A" in path_paragraph(path)


def test_one_rank_has_no_cross_rank_path() -> None:
    path = critical_path(table([step(0, 0, 100), work(0, 0, 100, "A")]))
    assert path.links.empty and path.steps.empty


@pytest.mark.parametrize("name", ["backward_pre", "none", "gpu-engine-gloo2-backward_pre"])
def test_links_tile_every_step_of_sample_runs(name: str) -> None:
    events, _, _ = align(load_run(REPO / "traces" / name).events)
    path = critical_path(events)
    assert len(path.steps) == 2
    for s in path.steps.itertuples(index=False):
        links = path.links[path.links["step"] == s.step]
        assert links["dur_us"].sum() == pytest.approx(s.step_us, rel=1e-9)
        # contiguous, latest first: each link starts where the next (earlier) one ends
        assert np.allclose(links["start_us"].to_numpy()[:-1], links["end_us"].to_numpy()[1:])
        assert links["end_us"].iloc[0] == pytest.approx(s.end_us)
        assert links["start_us"].iloc[-1] == pytest.approx(s.start_us)
        assert (links["dur_us"] > 0).all()
        assert set(links["kind"]) <= {"compute", "comm", "wait", "idle"}
    replayed = path.links.dropna(subset=["saving_us"])
    assert len(replayed) and (replayed["saving_us"] >= -1e-6).all()
    # a compute link 10% shorter never saves more than 10% of itself
    compute = replayed[replayed["kind"] == "compute"]
    assert (compute["saving_us"] <= 0.1 * compute["dur_us"] + 1e-6).all()


def test_analyze_and_diagnose_rank_the_path_finding() -> None:
    """Through the facade: a hand-built 2-rank run whose rank 1 computes A 80 µs longer in
    both steps gets the critical-path finding, with the path in the JSON."""
    rows = two_ranks(b1_dur=50, n=0) + two_ranks(b1_dur=50, n=1, t0=400)
    events = table(rows)
    infos = tuple(
        RankInfo(
            rank=r,
            path=Path(f"rank-{r}.json"),
            world_size=2,
            backend="gloo",
            framework="overlapscope",
            compute_source=ComputeSource.OVS_RANGES,
            steps=(0, 1),
            num_events=int((events["rank"] == r).sum()),
            has_gpu=False,
            base_time_ns=0,
        )
        for r in (0, 1)
    )
    run = RunTraces(events, infos, 2, None, False, (), ())
    a = analyze(run)
    kinds = [f.kind for f in a.findings]
    assert FindingKind.CRITICAL_PATH in kinds
    f = a.findings[kinds.index(FindingKind.CRITICAL_PATH)]
    assert f.title == "rank 1's forward of A is on the critical path in 2 of 2 steps"
    doc = a.to_json_dict()
    assert [s["step_us"] for s in doc["critical_path"]["steps"]] == [400.0, 400.0]
    assert doc["clocks"]["offsets"][1]["aligned"] is False  # 2 collectives: too few
