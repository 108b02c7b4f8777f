"""Bad input, case by case: one line naming the file, the problem and the fix; partial
results only when asked for (``allow_missing_ranks``) or when trace files are named one by
one."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import orjson
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from overlapscope.cli import main
from overlapscope.errors import UserError
from overlapscope.trace.read.parse import TraceFileError, read_trace
from overlapscope.trace.run.loader import load_run
from tests.trace.kineto import gloo, step, trace, write, x

GOOD = [
    step(1, 0, 50),
    x("ovs/fwd/u0", 0, 20),
    x("ovs/ag_fwd/u0", 20, 1),
    gloo("all_gather", 21, 10, 8),
]


def good(path: Path, rank: int = 0, world: int = 2) -> Path:
    return write(path, trace(rank, world, GOOD))


def corrupt_gzip(p: Path) -> None:
    data = bytearray(gzip.compress(orjson.dumps(trace(0, 1, GOOD))))
    data[20:40] = bytes(20)  # the deflate stream overwritten
    p.write_bytes(bytes(data))


def truncated_gzip(p: Path) -> None:
    p.write_bytes(gzip.compress(orjson.dumps(trace(0, 1, GOOD)))[:40])


def truncated_json(p: Path) -> None:
    p.write_bytes(orjson.dumps(trace(0, 1, GOOD))[:-25])


def cut_mid_event(p: Path) -> None:
    p.write_bytes(orjson.dumps(trace(0, 1, GOOD))[:150])


def nan_mid_file(p: Path) -> None:
    """A JSON syntax error in the middle of the file: the 3rd event's ts is a NaN token."""
    text = orjson.dumps(trace(0, 1, GOOD)).decode()
    assert '"ts":20,' in text
    p.write_text(text.replace('"ts":20,', '"ts":NaN,', 1))


CASES = [
    ("corrupt-gzip", "r.json.gz", corrupt_gzip, "corrupt gzip"),
    ("truncated-gzip", "r.json.gz", truncated_gzip, "truncated gzip"),
    ("truncated-json", "r.json", truncated_json, r"truncated: the file ends at byte \d+ after "),
    ("cut-mid-event", "r.json", cut_mid_event, r"truncated: the file ends at byte 150 in traceE"),
    (
        "nan-mid-file",
        "r.json",
        nan_mid_file,
        r"invalid JSON at byte \d+ in traceEvents\[2\] .*'NaN",
    ),
    ("not-a-trace", "r.json", lambda p: p.write_bytes(b'{"hello": 1}'), "not a Kineto trace"),
    ("json-list", "r.json", lambda p: p.write_bytes(b"[1, 2]"), "not a Kineto trace"),
    ("empty-trace", "r.json", lambda p: write(p, trace(0, 1, [])), "empty trace"),
    ("empty-file", "r.json", lambda p: p.write_bytes(b""), "empty file"),
    (
        "only-metadata",
        "r.json",
        lambda p: write(p, trace(0, 1, [{"ph": "M", "name": "x"}])),
        "empty trace",
    ),
]


@pytest.mark.parametrize(("case", "name", "make", "message"), CASES, ids=[c[0] for c in CASES])
def test_unreadable_file_is_one_line_and_exit_2(tmp_path, capsys, case, name, make, message):
    p = tmp_path / name
    make(p)
    with pytest.raises(TraceFileError, match=message):
        read_trace(p)
    assert main(["analyze", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert str(p) in err and re.search(message, err)


def test_directory_without_traces(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hi")
    assert main(["analyze", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no trace files" in err and str(tmp_path) in err


def test_missing_path(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "nope")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_one_bad_file_stops_and_names_it(tmp_path, capsys):
    good(tmp_path / "rank-0.json")
    corrupt_gzip(tmp_path / "rank-1.json.gz")
    with pytest.raises(UserError, match=r"rank-1\.json\.gz: corrupt gzip.*--allow-missing-ranks"):
        load_run(tmp_path)
    assert main(["analyze", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rank-1.json.gz" in err[0], err


def test_allow_missing_ranks_gives_warning_and_partial_results(tmp_path, capsys):
    good(tmp_path / "rank-0.json")
    corrupt_gzip(tmp_path / "rank-1.json.gz")
    run = load_run(tmp_path, allow_missing_ranks=True)
    assert [r.rank for r in run.ranks] == [0]
    assert any("rank-1.json.gz" in w and "corrupt gzip" in w for w in run.warnings)
    assert any("1 of 2 ranks missing: 1;" in w for w in run.warnings)
    assert main(["analyze", str(tmp_path), "--allow-missing-ranks"]) == 0
    out = capsys.readouterr().out
    assert "warning: skipped" in out and "corrupt gzip" in out


def test_a_rank_without_a_trace_stops(tmp_path):
    good(tmp_path / "rank-0.json", world=2)
    with pytest.raises(UserError, match=r"1 of 2 ranks have no trace \(1\)"):
        load_run(tmp_path)


def test_a_listed_trace_that_is_gone_is_named(tmp_path):
    good(tmp_path / "rank-0.json")
    good(tmp_path / "rank-1.json", rank=1)
    (tmp_path / "config.json").write_text("{}")  # written beside every run's traces
    (tmp_path / "run.json").write_text(json.dumps({"traces": ["rank-0.json", "rank-1.json"]}))
    (tmp_path / "rank-1.json").unlink()
    with pytest.raises(UserError, match=r"rank-1\.json: missing \(run\.json lists it\)"):
        load_run(tmp_path)
    run = load_run(tmp_path, allow_missing_ranks=True)
    assert not [w for w in run.warnings if "config.json" in w]


def test_another_tools_json_in_a_directory_is_skipped(tmp_path):
    good(tmp_path / "rank-0.json")
    good(tmp_path / "rank-1.json", rank=1)
    (tmp_path / "hta-summary.json").write_text('{"hello": 1}')
    run = load_run(tmp_path)
    assert [r.rank for r in run.ranks] == [0, 1]
    assert any("hta-summary.json" in w and "not a Kineto trace" in w for w in run.warnings)


def test_traces_of_two_runs_are_refused(tmp_path):
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        good(d / "rank-0.json")
        good(d / "rank-1.json", rank=1)
        (d / "run.json").write_text(json.dumps({"traces": ["rank-0.json", "rank-1.json"]}))
    with pytest.raises(UserError, match="different runs"):
        load_run([tmp_path / "a", tmp_path / "b"])
    with pytest.raises(UserError, match="different runs"):
        load_run([tmp_path / "a" / "rank-0.json", tmp_path / "b" / "rank-1.json"])


def test_no_distributed_info_single_file_is_rank_0_with_warning(tmp_path):
    p = write(tmp_path / "t.json", trace(None, 1, GOOD))
    run = load_run(p)
    assert [r.rank for r in run.ranks] == [0]
    assert any("no distributedInfo" in w for w in run.warnings)


def test_no_distributed_info_in_a_set_is_skipped(tmp_path):
    good(tmp_path / "rank-0.json")
    write(tmp_path / "rank-1.json", trace(None, 2, GOOD))
    with pytest.raises(UserError, match=r"1 of 2 ranks have no trace \(1\)"):
        load_run(tmp_path)  # the skipped file leaves rank 1 without a trace
    run = load_run(tmp_path, allow_missing_ranks=True)
    assert [r.rank for r in run.ranks] == [0]
    assert any("rank-1.json" in w and "no distributedInfo" in w for w in run.warnings)


def test_rank_comes_from_distributed_info_not_the_file_name(tmp_path):
    good(tmp_path / "rank-0.json", rank=1)
    good(tmp_path / "rank-1.json", rank=0)
    run = load_run(tmp_path)
    assert {r.rank: r.path.name for r in run.ranks} == {0: "rank-1.json", 1: "rank-0.json"}


def test_duplicate_ranks_stop_unless_allowed(tmp_path):
    good(tmp_path / "a.json", rank=0)
    good(tmp_path / "b.json", rank=0)
    with pytest.raises(UserError, match="two traces of rank 0"):
        load_run(tmp_path)
    run = load_run(tmp_path, allow_missing_ranks=True)
    assert len(run.ranks) == 1
    assert any("duplicate rank 0" in w for w in run.warnings)


def test_mixed_runs_are_refused(tmp_path, capsys):
    good(tmp_path / "a.json", rank=0, world=2)
    good(tmp_path / "b.json", rank=1, world=4)
    with pytest.raises(UserError, match="mixed runs"):
        load_run(tmp_path)
    assert main(["analyze", str(tmp_path)]) == 2


def test_trace_without_communication(tmp_path, capsys):
    p = write(tmp_path / "t.json", trace(0, 1, [step(1, 0, 10), x("aten::mm", 1, 5, cat="cpu_op")]))
    assert main(["analyze", str(p)]) == 0
    out = capsys.readouterr().out
    assert "no communication found" in out


def test_partial_run_directory_is_flagged(tmp_path):
    good(tmp_path / "rank-0.json", world=1)
    (tmp_path / "run.json.partial").write_text("{}")
    run = load_run(tmp_path)
    assert not run.completed_run
    assert any("not a completed overlapscope run" in w for w in run.warnings)


# --- fuzz: the loader either loads or raises TraceFileError, nothing else -----------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3)
    ),
    max_leaves=8,
)
event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "M", "i"])},
    optional={
        "name": st.sampled_from(
            ["gloo:all_gather", "ProfilerStep#1", "ovs/fwd/u", "ncclKernel_AllReduce", "x", 3]
        ),
        "ts": st.one_of(st.floats(0, 1e6), st.integers(0, 10**6), st.text(max_size=3), st.none()),
        "dur": st.one_of(st.floats(-5, 1e3), st.integers(0, 100), st.none()),
        "tid": st.one_of(st.integers(0, 5), st.text(max_size=3)),
        "cat": st.sampled_from(["kernel", "cpu_op", "user_annotation"]),
        "args": st.one_of(
            json_values,
            st.fixed_dictionaries(
                {"stream": st.integers(-1, 9), "correlation": st.integers(-1, 9)}
            ),
        ),
    },
)
docs = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"traceEvents": st.lists(event, max_size=8)},
        optional={
            "distributedInfo": st.one_of(
                json_values,
                st.fixed_dictionaries({"rank": st.integers(0, 3), "world_size": st.integers(1, 4)}),
            ),
            "baseTimeNanoseconds": st.one_of(st.integers(0, 10**18), st.text(max_size=2)),
        },
    ),
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(doc=docs, cut=st.integers(0, 400), gz=st.booleans())
def test_fuzz_loader_never_crashes(tmp_path, doc, cut, gz):
    data = orjson.dumps(doc)
    if cut:
        data = data[: max(len(data) - cut, 0)]
    p = tmp_path / ("f.json.gz" if gz else "f.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    try:
        run = load_run(p)
    except UserError:
        return
    from overlapscope.analysis import analyze

    analyze(run).to_json_dict()


def kineto_layout(doc: dict) -> bytes:
    """Serialise like torch's export_chrome_trace: one indented block per event with its args
    on their own lines, extra top-level keys after the events array."""

    def block(e: dict) -> bytes:
        lines = [b"    " + json.dumps({k: v})[1:-1].encode() for k, v in e.items() if k != "args"]
        text = b",\n".join(lines)
        if "args" in e:
            text += b',\n    "args": {\n      ' + json.dumps(e["args"])[1:-1].encode() + b"\n    }"
        return b"  {\n" + text + b"\n  }"

    head = {k: v for k, v in doc.items() if k not in ("traceEvents", "baseTimeNanoseconds")}
    body = b",\n".join(block(e) for e in doc["traceEvents"])
    return (
        orjson.dumps(head)[:-1]
        + b', "traceEvents": [\n'
        + body
        + b'\n  ],\n  "baseTimeNanoseconds": '
        + str(doc["baseTimeNanoseconds"]).encode()
        + b"\n}"
    )


@pytest.mark.parametrize("gz", [False, True])
def test_sliced_decoding_gives_the_same_table_as_whole_decoding(tmp_path, monkeypatch, gz):
    import overlapscope.trace.read.decode as decode
    import overlapscope.trace.read.reader as reader
    from tests.analysis.test_known_answers import cpu_rank_events, gpu_events

    shapes = {"Input Dims": [[4, 4], [4]], "Input type": ["float", "float"]}
    extra = [x("aten::mm", 11 + i, 1, cat="cpu_op", args=shapes) for i in range(5)]
    events = cpu_rank_events(1.0) + extra + gpu_events()
    doc = trace(0, 1, events)
    whole = read_trace(write(tmp_path / "compact.json", doc))
    p = tmp_path / ("kineto.json.gz" if gz else "kineto.json")
    text = kineto_layout(doc)
    p.write_bytes(gzip.compress(text) if gz else text)
    # slices of ~150 bytes of events, read 100 bytes at a time
    monkeypatch.setattr(reader, "CHUNK_BYTES", 150)
    monkeypatch.setattr(reader, "BLOCK_BYTES", 100)
    slices: list[int] = []
    add_slice = decode.EventColumns.add_slice
    monkeypatch.setattr(
        decode.EventColumns,
        "add_slice",
        lambda b, t, lo, hi: slices.append(hi - lo - 2) or add_slice(b, t, lo, hi),
    )
    sliced = read_trace(p)
    assert len(slices) > 3 and sum(slices) > 0.9 * len(text)
    for col in whole.events.columns:
        assert whole.events[col].astype(str).tolist() == sliced.events[col].astype(str).tolist()
    pd.testing.assert_frame_equal(whole.comm_args, sliced.comm_args, check_dtype=False)
    assert sliced.thread_names == whole.thread_names and len(sliced.thread_names) == 2
    assert sliced.base_time_ns == whole.base_time_ns
    # a cut-off file in this layout still reports truncated JSON, a cut-off gzip the gzip
    cut = text[:-60]
    p.write_bytes(gzip.compress(cut) if gz else cut)
    with pytest.raises(TraceFileError, match="truncated: the file ends"):
        read_trace(p)
    if gz:
        p.write_bytes(gzip.compress(text)[:-30])
        with pytest.raises(TraceFileError, match="truncated gzip"):
            read_trace(p)


def test_progress_display_does_not_change_results(tmp_path):
    good(tmp_path / "rank-0.json", world=1)
    assert load_run(tmp_path, progress=True).events.shape == load_run(tmp_path).events.shape
