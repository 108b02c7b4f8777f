"""Every header field typed, every required key of an event checked (issue #32, point 3): a
field the analysis needs that has the wrong type or is out of range is one line naming the
field; one it can do without is left out with a counted warning; an event missing a key the
analysis reads is counted in the file's warning like the other reasons."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from overlapscope.cli import main
from overlapscope.trace.run.loader import load_run
from tests.trace.kineto import gloo, kernel, step, trace, write, x

GOOD = [
    step(1, 0, 50),
    x("ovs/fwd/u0", 0, 20),
    x("ovs/ag_fwd/u0", 20, 1),
    gloo("all_gather", 21, 10, 8),
]
LONG = "x" * 100_000


def doc_with(field: str, value: Any) -> dict[str, Any]:
    doc = trace(0, 2, GOOD)
    holder, _, key = field.rpartition(".")
    target = doc
    for part in filter(None, holder.split(".")):
        target = target[part]
    target[key] = value
    return doc


# A field the analysis needs: refused in one line naming it.
ERRORS = {
    "world_size-string": ("distributedInfo.world_size", "two", "'world_size' is a string"),
    "world_size-object": ("distributedInfo.world_size", {"n": 2}, "'world_size' is an object"),
    "world_size-1e308": ("distributedInfo.world_size", 1e308, "'world_size' is a number (1e+308)"),
    "world_size-long": ("distributedInfo.world_size", LONG, "100,000 long"),
    "world_size-null": ("distributedInfo.world_size", None, "'world_size' is null"),
    "world_size-bool": ("distributedInfo.world_size", True, "'world_size' is a boolean"),
    "world_size-huge": ("distributedInfo.world_size", 2**40, "out of range"),
    "rank-string": ("distributedInfo.rank", "0", "no integer 'rank' (it is a string ('0'))"),
    "info-list": ("distributedInfo", [0, 2], "distributedInfo is a list"),
    "info-null": ("distributedInfo", None, "distributedInfo is null"),
    "stamp-not-object": ("overlapscopeRun", "abc", "overlapscopeRun is a string ('abc')"),
    "stamp-bad-id": ("overlapscopeRun", {"run_id": LONG, "rank": 0}, "'run_id' is a string"),
    "stamp-bad-rank": ("overlapscopeRun", {"run_id": "a" * 32, "rank": -1}, "'rank' is an int"),
    "stamp-other-rank": ("overlapscopeRun", {"run_id": "a" * 32, "rank": 1}, "says rank 1"),
}
# A field the analysis can do without: left out with one warning line.
WARNINGS = {
    "base-string": ("baseTimeNanoseconds", "soon", "baseTimeNanoseconds is a string ('soon')"),
    "base-negative": ("baseTimeNanoseconds", -5, "baseTimeNanoseconds is an integer (-5)"),
    "base-float": ("baseTimeNanoseconds", 1.5e18, "baseTimeNanoseconds is a number"),
    "base-huge": ("baseTimeNanoseconds", 2**63, "baseTimeNanoseconds is an integer (9223"),
    "base-null": ("baseTimeNanoseconds", None, "baseTimeNanoseconds is null"),
    "backend-list": ("distributedInfo.backend", ["gloo"], "'backend' is a list"),
    "backend-long": ("distributedInfo.backend", LONG, "'backend' is a string"),
    "pg_count-string": ("distributedInfo.pg_count", "1", "'pg_count' is a string"),
    "pg_config-object": ("distributedInfo.pg_config", {}, "'pg_config' is an object"),
    "devices-string": ("deviceProperties", "gpu", "deviceProperties is a string"),
    "devices-entry": ("deviceProperties", [{"id": 0}, 3], "entry 1 is an integer (3)"),
    "devices-mem": (
        "deviceProperties",
        [{"id": 0, "name": "H100", "totalGlobalMem": "80GB"}],
        "entry 0 field 'totalGlobalMem' is a string ('80GB')",
    ),
}


@pytest.mark.parametrize("case", list(ERRORS), ids=list(ERRORS))
def test_a_needed_header_field_of_the_wrong_type_is_one_line(tmp_path, capsys, case):
    field, value, needle = ERRORS[case]
    p = write(tmp_path / "rank-0.json", doc_with(field, value))
    assert main(["analyze", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rank-0.json" in err[0] and needle in err[0], err
    assert len(err[0]) < 400  # a 100,000-character value is not repeated


@pytest.mark.parametrize("case", list(WARNINGS), ids=list(WARNINGS))
def test_a_header_field_the_analysis_can_do_without_is_a_counted_warning(tmp_path, case):
    field, value, needle = WARNINGS[case]
    run = load_run(
        write(tmp_path / "rank-0.json", doc_with(field, value)), allow_missing_ranks=True
    )
    found = [w for w in run.warnings if needle in w]
    assert len(found) == 1 and found[0].startswith("rank 0 (rank-0.json): "), run.warnings
    assert "left out" in found[0] and len(found[0]) < 400
    assert len(run.events) == len(GOOD)


def test_absent_header_fields_are_no_problem(tmp_path):
    doc = trace(0, 1, GOOD)
    del doc["baseTimeNanoseconds"]
    run = load_run(write(tmp_path / "rank-0.json", doc))
    assert not [w for w in run.warnings if "left out" in w]


MISSING = {
    "ph": "1 event with a missing or unknown ph",
    "cat": "1 event with a missing or non-string cat",
    "name": "1 event with a missing or non-string name",
    "tid": "1 event with a missing tid, or one neither an integer nor a string",
    "ts": "1 event with a missing or non-numeric ts",
    "dur": "1 event with a missing or non-numeric dur",
}


@pytest.mark.parametrize("key", list(MISSING), ids=list(MISSING))
def test_an_event_missing_a_required_key_is_counted(tmp_path, key):
    broken = x("ovs/fwd/u0", 30, 5)
    del broken[key]
    run = load_run(write(tmp_path / "rank-0.json", trace(0, 1, [*GOOD, broken])))
    lines = [w for w in run.warnings if "ignored in rank-0.json" in w]
    assert lines == [f"{MISSING[key]} ignored in rank-0.json"], run.warnings
    assert len(run.events) == len(GOOD)


@pytest.mark.parametrize("ph", ["", "x", 3, None, ["X"]], ids=repr)
def test_an_event_of_no_known_phase_is_counted(tmp_path, ph):
    run = load_run(write(tmp_path / "r.json", trace(0, 1, [*GOOD, {**x("a", 1, 1), "ph": ph}])))
    assert "1 event with a missing or unknown ph ignored in r.json" in run.warnings


def test_gpu_activity_without_a_stream_is_counted(tmp_path):
    lost = kernel("ncclKernel_AllGather", 30, 5, correlation=1)
    del lost["args"]
    run = load_run(write(tmp_path / "r.json", trace(0, 1, [*GOOD, lost])))
    assert (
        "1 event with GPU activity (kernel, memcpy, memset) without a stream in its args "
        "ignored in r.json"
    ) in run.warnings
    assert not run.events["on_gpu"].any()


def test_non_object_entries_of_trace_events_are_counted(tmp_path: Path):
    run = load_run(write(tmp_path / "r.json", trace(0, 1, [*GOOD, 7, "x", [1]])))
    assert "3 events with a value that is not a JSON object ignored in r.json" in run.warnings
    assert len(run.events) == len(GOOD)


@pytest.mark.parametrize("value", ["1e3", True, "12"], ids=repr)
def test_a_ts_or_dur_that_is_not_a_json_number_is_counted_not_read(tmp_path, value):
    """A string that spells a number, or a bool, is not read as that number."""
    broken = [{**x("ovs/fwd/u0", 30, 5), "ts": value}, {**x("ovs/fwd/u0", 40, 5), "dur": value}]
    run = load_run(write(tmp_path / "r.json", trace(0, 1, [*GOOD, *broken])))
    line = next(w for w in run.warnings if w.endswith("ignored in r.json"))
    assert "1 event with a missing or non-numeric ts" in line
    assert "1 event with a missing or non-numeric dur" in line
    assert len(run.events) == len(GOOD)


@pytest.mark.parametrize(
    "record",
    [{"tid": "1", "args": {"name": "python"}}, {"tid": 1, "args": [1]}, {"tid": 1, "args": {}}],
    ids=["tid-string", "args-list", "no-name"],
)
def test_a_malformed_thread_name_record_is_counted(tmp_path, record):
    meta = {"ph": "M", "name": "thread_name", "pid": 10, **record}
    run = load_run(write(tmp_path / "r.json", trace(0, 1, [*GOOD, meta])))
    assert (
        "1 event with the name thread_name but no integer tid or string args.name ignored in r.json"
        in run.warnings
    )
