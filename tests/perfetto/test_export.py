"""The export of real runs (issue 35, point 2): a valid Chrome trace, every rank its own
process on the analysis' clock, the analysis' tracks equal to its tables, and the file read
back by overlapscope's loader gives the source run's partition. On every shipped run, every
shared external trace, and (test_many_ranks.py) a 64-rank run."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pandas as pd
import pytest

from overlapscope.analysis.api import analyze
from overlapscope.analysis.clocks.alignment import offset_at
from overlapscope.analysis.findings import Finding
from overlapscope.trace.read.merged import SOURCE_PID, SOURCE_ROW, SOURCE_TID
from overlapscope.trace.read.reader import read_bytes
from overlapscope.trace.run.loader import load_run
from tests.conftest import EXTERNAL_TRACES, REPO
from tests.perfetto.conftest import EXTERNAL, NO_EXTERNAL, SHIPPED, Exported, export

PARTITION = ["step_time_us", "compute_us", "exposed_comm_us", "exposed_memory_us"]
PARTITION += ["other_us", "idle_us"]
SOURCES = [
    *(pytest.param(REPO / "traces" / n, id=n) for n in SHIPPED),
    *(pytest.param(EXTERNAL_TRACES / n, id=n) for n in EXTERNAL),
]
if not EXTERNAL:
    SOURCES.append(pytest.param(None, marks=pytest.mark.skip(reason=NO_EXTERNAL), id="external"))
NS = 1e-3  # µs: the added tracks are written in whole nanoseconds


@pytest.fixture(params=SOURCES)
def exported(request: pytest.FixtureRequest, out_dir) -> Exported:  # type: ignore[no-untyped-def]
    return export(request.param, out_dir)


def test_every_rank_is_a_named_process(exported: Exported) -> None:
    trace, analysis = exported.trace, exported.analysis
    by_rank = {args["rank"]: pid for pid, args in trace.processes.items() if "rank" in args}
    assert sorted(by_rank) == list(analysis.summary.ranks)
    for rank, pid in by_rank.items():
        assert trace.processes[pid]["name"].startswith(f"rank {rank} · ")
        names = {n for (p, _), n in trace.threads.items() if p == pid}
        assert names, f"rank {rank} has no named thread"
    assert trace.top["overlapscope_export"]["ranks"] == list(analysis.summary.ranks)


def test_source_threads_keep_their_names(exported: Exported) -> None:
    """Each thread and stream of a rank's source trace that holds an event is a track of the
    rank's process, under the name its source gave it (the last, where it gave several)."""
    for info in exported.run.ranks:
        events = orjson.loads(read_bytes(info.path))["traceEvents"]
        used = {(e.get("pid"), e.get("tid")) for e in events if e.get("ph") != "M"}
        given = {
            (e.get("pid"), e.get("tid")): e["args"]["name"]
            for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"
        }
        pid = info.rank + 1
        ours = {
            (args[SOURCE_PID], args[SOURCE_TID]): exported.trace.threads[key]
            for key, args in exported.trace.thread_args.items()
            if key[0] == pid and SOURCE_TID in args and SOURCE_ROW not in args
        }
        assert used <= set(ours), f"rank {info.rank}: tracks missing {used - set(ours)}"
        for key in used & set(given):
            assert ours[key] == given[key], (info.rank, key)


def test_offsets_are_the_analysis(exported: Exported) -> None:
    """Each process names the analysis' offset and its uncertainty, and its events are
    moved by that: each ProfilerStep is where the loader puts it, less the offset."""
    trace, analysis, run = exported.trace, exported.analysis, exported.run
    clocks = analysis.clocks
    assert clocks is not None
    for pid, args in trace.processes.items():
        if "rank" not in args:
            continue
        row = clocks[clocks["rank"] == args["rank"]].iloc[0]
        for key in ("offset_us", "stderr_us"):
            if np.isfinite(row[key]):
                assert args[key] == pytest.approx(row[key], abs=1e-9)
        assert args.get("aligned", False) == bool(row["aligned"])
        if row["rank"] == row["reference_rank"]:
            assert "reference clock" in args["name"]
        elif np.isfinite(row["offset_us"]):
            text = f"offset {row['offset_us']:+,.1f} ± {row['stderr_us']:,.1f} µs"
            assert text in args["name"]
            assert ("(removed)" if row["aligned"] else "not applied") in args["name"]
        else:
            assert "offset not estimated" in args["name"]
        ours = sorted(
            e["ts"]
            for e in trace.of_pid(pid)
            if e["ph"] == "X"
            and e["name"].startswith("ProfilerStep#")
            and e.get("cat") != "gpu_user_annotation"  # (its shadow on a stream's row)
        )
        ev = run.events
        mine = ev[
            (ev["rank"] == args["rank"]) & ev["name"].astype(str).str.startswith("ProfilerStep#")
        ]
        mine = mine[~mine["on_gpu"]]
        raw = mine["ts_us"].to_numpy()
        expected = np.sort(raw - offset_at(clocks, mine["rank"].to_numpy(), raw))
        # within a nanosecond: the file's time is moved in one subtraction, the loader's in two
        np.testing.assert_allclose(ours, expected, rtol=0, atol=NS)


def test_read_back_gives_the_same_partition(exported: Exported) -> None:
    again = analyze(load_run(exported.path, progress=False))
    a = exported.analysis.steps.sort_values(["rank", "step"]).reset_index(drop=True)
    b = again.steps.sort_values(["rank", "step"]).reset_index(drop=True)
    assert a[["rank", "step"]].equals(b[["rank", "step"]])
    np.testing.assert_allclose(b[PARTITION].to_numpy(), a[PARTITION].to_numpy(), atol=1e-6)
    assert again.summary.ranks == exported.analysis.summary.ranks


def _union_us(events: list[dict[str, object]], rank: int) -> float:
    """The time the rank's slices cover (where several overlap, once)."""
    total, reach = 0.0, -np.inf
    for a, b in sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["pid"] == rank + 1):  # type: ignore[operator]
        total += max(0.0, b - max(a, reach))
        reach = max(reach, b)
    return total


def _pieces(pieces: list[dict[str, Any]]) -> pd.DataFrame:
    columns = ("unit", "phase", "kind", "group", "step", "seq")
    return pd.DataFrame(
        [
            {k: e["args"].get(k) for k in columns} | {"rank": e["pid"] - 1, "dur": e["dur"]}
            for e in pieces
        ],
        columns=[*columns, "rank", "dur"],
    )


def test_exposed_tracks_are_the_exposed_intervals(exported: Exported) -> None:
    """Per rank the exposed slices cover the analysis' exposed intervals; each collective's
    slices add up to its own exposed time on that rank (``collective_ranks``)."""
    trace, analysis = exported.trace, exported.analysis
    pieces = trace.ours("exposed")
    for rank in analysis.summary.ranks:
        want = analysis.exposed[analysis.exposed["rank"] == rank]
        assert _union_us(pieces, rank) == pytest.approx(
            want["dur_us"].sum(), abs=NS * (len(pieces) + 1)
        )
    rows = _pieces(pieces)
    got = (
        rows[rows["seq"].notna()]
        .groupby(["rank", "group", "step", "seq"])["dur"]
        .agg(["sum", "size"])
    )
    per_rank = analysis.collective_ranks.set_index(["rank", "group", "step", "seq"])
    exposed = per_rank["exposed_us"][per_rank["exposed_us"] > NS]
    joined = got.join(exposed, how="outer").fillna(0.0)
    if not len(joined):
        return
    slack = NS * (float(joined["size"].max()) + 1)
    np.testing.assert_allclose(
        joined["sum"].to_numpy(float), joined["exposed_us"].to_numpy(float), atol=slack
    )


def test_exposed_by_unit_is_the_units_table(exported: Exported) -> None:
    """Where no two transfers of a rank are exposed at once (the units table then shares the
    time between them), the slices add up per unit, phase and kind to its exposed time."""
    trace, analysis = exported.trace, exported.analysis
    pieces = trace.ours("exposed")
    rows = _pieces(pieces)
    units = analysis.units.astype({"unit": object, "phase": object, "kind": object})
    for record in units.to_dict("records"):
        rank = record["rank"]
        if _union_us(pieces, rank) < rows.loc[rows["rank"] == rank, "dur"].sum() - NS * len(rows):
            continue  # two exposed at once
        same = (rows["rank"] == rank) & (rows["kind"] == record["kind"])
        for c in ("unit", "phase"):
            missing = record[c] is None or record[c] != record[c]
            same &= rows[c].isna() if missing else rows[c] == record[c]
        got = rows.loc[same, "dur"]
        assert got.sum() == pytest.approx(record["exposed_total_us"], abs=NS * (len(got) + 1)), (
            record
        )


def test_waiting_for_a_peer_is_the_analysis(exported: Exported) -> None:
    trace, analysis = exported.trace, exported.analysis
    waits = trace.ours("waiting for a peer")
    per_rank = analysis.collective_ranks
    for rank in analysis.summary.ranks:
        want = per_rank.loc[
            (per_rank["rank"] == rank) & (per_rank["peer_wait_us"] > 0), "peer_wait_us"
        ]
        got = [e["dur"] for e in waits if e["pid"] == rank + 1]
        assert sum(got) == pytest.approx(want.sum(), abs=NS * (len(got) + 1))
        assert len(got) == len(want)


def test_critical_path_slices_and_arrows(exported: Exported) -> None:
    """Each step's path slices add up to its path length; one arrow per change of rank."""
    trace, analysis = exported.trace, exported.analysis
    path = analysis.path
    assert path is not None
    slices = trace.ours("critical path")
    for step in path.steps.to_dict("records"):
        got = [e["dur"] for e in slices if e["args"]["step"] == step["step"]]
        assert sum(got) == pytest.approx(step["path_us"], abs=NS * (len(got) + 1))
    links = path.links.sort_values(["step", "order"], ascending=[True, False])
    changes = sum(
        int((g["rank"].to_numpy()[1:] != g["rank"].to_numpy()[:-1]).sum())
        for _, g in links.groupby("step")
    )
    arrows = [e for e in trace.events if e["ph"] == "s" and e.get("cat") == "overlapscope.path"]
    short = sum(int(w.split()[0]) for w in exported.warnings if "hops of the critical" in w)
    assert len(arrows) + short == changes


def test_findings_are_instants_at_their_steps(exported: Exported) -> None:
    """One mark per step a finding names (its ``steps``; none named: every counted step of
    its rank, or of the run)."""
    trace, analysis = exported.trace, exported.analysis
    marks = [e for e in trace.events if e["ph"] == "i" and e.get("cat") == "overlapscope"]
    every = sorted({s for ss in analysis.counted_steps.values() for s in ss})

    def steps_of(f: Finding) -> list[int]:
        if f.steps:
            return sorted(f.steps)
        return list(analysis.counted_steps[f.rank]) if f.rank is not None else every

    for f in analysis.findings:
        mine = [m for m in marks if m["args"]["title"] == f.title]
        assert sorted(m["args"]["step"] for m in mine) == steps_of(f)
        for m in mine:
            assert m["args"]["summary"] == f.summary and m["args"]["change"] == f.change
            assert m["pid"] == (f.rank + 1 if f.rank is not None else 2**31 - 1)
    assert len(marks) == sum(len(steps_of(f)) for f in analysis.findings)
