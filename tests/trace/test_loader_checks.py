"""The loader checks each field once: bad events are counted and named in one warning line,
run.json fields are typed, ranks of two runs or two traces of one rank are refused, missing
ranks are summarised as ranges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from overlapscope.analysis import analyze
from overlapscope.cli import main
from overlapscope.errors import UserError
from overlapscope.trace.read.reader import BOM_SKIPPED
from overlapscope.trace.run.loader import load_run
from overlapscope.trace.run.ranks import missing_ranks, rank_ranges
from tests.trace.kineto import BASE_NS, gloo, step, trace, write, x

GOOD = [
    step(1, 0, 50),
    x("ovs/fwd/u0", 0, 20),
    x("ovs/ag_fwd/u0", 20, 1),
    gloo("all_gather", 21, 10, 8),
]


def with_bad_events(path: Path) -> Path:
    bad = [
        x("ovs/fwd/u0", 30, -5),  # negative dur
        x("ovs/fwd/u0", 31, -1),
        {**x("ovs/fwd/u0", 32, 1), "dur": "long"},  # non-numeric dur
        {**x("ovs/fwd/u0", 33, 1), "ts": None},  # missing ts
        {**x("ovs/fwd/u0", 34, 1), "name": ["a", "list"]},  # name not a string
        {**x("ovs/fwd/u0", 35, 1), "args": [1, 2]},  # args not an object
        x("ovs/fwd/u0", 1e300, 1),  # out of range
    ]
    return write(path, trace(0, 1, GOOD + bad))


def test_bad_events_are_counted_named_and_left_out(tmp_path):
    run = load_run(with_bad_events(tmp_path / "rank-0.json"))
    lines = [w for w in run.warnings if "ignored in rank-0.json" in w]
    assert len(lines) == 1, run.warnings
    for part in (
        "2 events with a negative dur",
        "1 event with a missing or non-numeric dur",
        "1 event with a missing or non-numeric ts",
        "1 event with a missing or non-string name",
        "1 event with args that are not an object",
        "1 event with an out-of-range ts or dur",
    ):
        assert part in lines[0], lines[0]
    assert len(run.events) == len(GOOD)
    a = analyze(run)
    assert a.ranks.iloc[0]["compute_total_us"] == pytest.approx(20)


def test_byte_order_mark_is_skipped_with_a_warning(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps(trace(0, 1, GOOD)).encode())
    run = load_run(p)
    assert len(run.events) == len(GOOD)
    assert list(run.warnings) == [f"rank 0 (t.json): {BOM_SKIPPED}"]
    clean = write(tmp_path / "clean.json", trace(0, 1, GOOD))
    assert not load_run(clean).warnings


@pytest.mark.parametrize(("rank", "world"), [(2**31, 4), (5, 4), (-1, 2), (0, 2 * 10**9)], ids=str)
def test_out_of_range_rank_or_world_size_is_one_line(tmp_path, capsys, rank, world):
    p = write(tmp_path / "t.json", trace(rank, world, GOOD))
    assert main(["analyze", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "out of range" in err[0] and "t.json" in err[0]


def run_dir(tmp_path: Path, meta: object) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    write(d / "rank-0.json", trace(0, 1, GOOD))
    (d / "run.json").write_text(meta if isinstance(meta, str) else json.dumps(meta))
    return d


@pytest.mark.parametrize(
    ("meta", "field"),
    [
        ({"world_size": "two"}, "'world_size'"),
        ({"world_size": None}, "'world_size'"),
        ({"world_size": 2 * 10**9}, "'world_size'"),
        ({"traces": "rank-0.json"}, "'traces'"),
        ({"config": [1]}, "'config'"),
        ({"peak_mem_bytes": ["1"]}, "'peak_mem_bytes'"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
    ],
    ids=["ws-str", "ws-null", "ws-huge", "traces-str", "config-list", "peaks", "corrupt", "list"],
)
def test_bad_run_json_is_one_line_naming_the_field(tmp_path, capsys, meta, field):
    d = run_dir(tmp_path, meta)
    assert main(["analyze", str(d)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run.json" in err[0] and field in err[0], err


def test_two_traces_of_one_rank_are_refused_unless_ranks_come_from_names(tmp_path, capsys):
    d = tmp_path / "set"
    d.mkdir()
    write(d / "rank-0.json", trace(0, 2, GOOD))
    write(d / "rank-1.json", trace(0, 2, GOOD))  # a copy of rank 0 under rank 1's name
    assert main(["analyze", str(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert "two traces of rank 0" in err and "--rank-from-name" in err and "\n" not in err
    run = load_run(d, rank_from_names=True)
    assert [r.rank for r in run.ranks] == [0, 1]


def test_traces_without_distributed_info_take_ranks_from_names(tmp_path):
    d = tmp_path / "set"
    d.mkdir()
    for r in (0, 1):
        doc = trace(r, 2, GOOD)
        del doc["distributedInfo"]
        write(d / f"rank_{r}.json", doc)
    with pytest.raises(UserError, match="--rank-from-name"):
        load_run(d)
    assert [r.rank for r in load_run(d, rank_from_names=True).ranks] == [0, 1]


def test_ranks_whose_clocks_start_hours_apart_are_two_runs(tmp_path):
    write(tmp_path / "rank-0.json", trace(0, 2, GOOD))
    write(tmp_path / "rank-1.json", trace(1, 2, GOOD, base_ns=BASE_NS + 5 * 3600 * 10**9))
    with pytest.raises(UserError, match=r"rank-1\.json: step 1 starts 5\.0 h after rank-0\.json"):
        load_run([tmp_path / "rank-0.json", tmp_path / "rank-1.json"])


def test_missing_ranks_are_summarised_as_ranges(tmp_path):
    p = write(tmp_path / "rank-0.json", trace(0, 128, GOOD))
    run = load_run(p)
    assert "127 of 128 ranks missing: 1-127;" in run.warnings[0]
    assert missing_ranks([0, 5, 6, 9], 12) == (8, "1-4, 7-8, 10-11")
    assert missing_ranks([3], 2 * 10**9)[0] == 2 * 10**9 - 1  # no range materialised
    assert rank_ranges([1, 2, 3, 7]) == "1-3, 7"
