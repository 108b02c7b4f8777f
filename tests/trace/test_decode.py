"""The decoder reads only the fields the analysis uses, and reads them as orjson reads the
document (the reader before msgspec, whose values and errors the users have)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import pytest

import overlapscope.trace.read.columns as columns
import overlapscope.trace.read.decode as decode
import overlapscope.trace.read.reader as reader
from overlapscope.trace.read.parse import RawTrace, TraceFileError, read_trace
from tests.analysis.test_known_answers import cpu_rank_events, gpu_events
from tests.trace.kineto import thread_name, trace, x
from tests.trace.test_bad_input import kineto_layout

BIG = [list(range(1000))] * 20  # ~80 KB of JSON


def sample() -> dict:
    extra = [thread_name(1, "python")]
    return trace(0, 2, cpu_rank_events(1.0) + gpu_events() + extra)


def same(a: RawTrace, b: RawTrace) -> None:
    pd.testing.assert_frame_equal(a.events, b.events)
    pd.testing.assert_frame_equal(a.comm_args, b.comm_args)
    assert (a.rank, a.world_size, a.backend) == (b.rank, b.world_size, b.backend)
    assert (a.base_time_ns, a.origin_ns, a.first_ts_us) == (
        b.base_time_ns,
        b.origin_ns,
        b.first_ts_us,
    )
    assert a.thread_names == b.thread_names and a.dropped == b.dropped


def dump(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))  # json, not orjson: it writes integers beyond 64 bits
    return path


def test_unused_fields_do_not_change_the_table(tmp_path: Path) -> None:
    doc = sample()
    padded = copy.deepcopy(doc)
    padded["deviceProperties"] = [{"big": BIG}]
    for e in padded["traceEvents"]:
        e["pid"], e["id"], e["unused"] = "x", 7, {"nested": BIG}
        if isinstance(e.get("args"), dict):  # the shapes of a CPU op; kept for a collective
            e["args"] |= {"Input Strides": BIG, "Concrete Inputs": ["", BIG]}
    assert len(json.dumps(padded)) > 20 * len(json.dumps(doc))
    same(read_trace(dump(tmp_path / "a.json", doc)), read_trace(dump(tmp_path / "b.json", padded)))


def test_numbers_beyond_64_bits_read_as_floats_as_orjson_reads_them(tmp_path: Path) -> None:
    big = 2**70
    docs = []
    for value in (big, float(big)):
        doc = sample()
        events = doc["traceEvents"]
        events.append(x("odd tid", 50.0, 1.0, tid=value))  # type: ignore[arg-type]
        events.append(x("odd cat", 51.0, 1.0, cat=value))  # type: ignore[arg-type]
        events.append(thread_name(value, "odd"))  # type: ignore[arg-type]
        dims = {"Seq": value, "Input Dims": [[value]], "Input type": ["float"]}
        events.append(x("gloo:all_reduce", 52.0, 1.0, args=dims))
        doc["baseTimeNanoseconds"] = value
        docs.append(read_trace(dump(tmp_path / f"{type(value).__name__}.json", doc)))
    same(*docs)
    # a float (2**70 as orjson reads it) is no thread id, category or base time: each counted
    assert "1 event with a missing or non-string cat" in docs[0].dropped
    assert "1 event with a missing tid, or one neither an integer" in docs[0].dropped
    assert docs[0].base_time_ns is None
    assert "baseTimeNanoseconds is a number (1.1805916207174113e+21)" in docs[0].header_warnings[0]


def test_an_integer_beyond_the_float_range_is_invalid_json_in_a_field_used(tmp_path: Path) -> None:
    doc = sample()
    doc["traceEvents"][3]["ts"] = 10**400
    with pytest.raises(TraceFileError, match=r"invalid JSON at byte \d+ in traceEvents\[3\]"):
        read_trace(dump(tmp_path / "used.json", doc))
    # in a field never read it is skipped (orjson refused the whole file)
    doc = sample()
    doc["traceEvents"][3]["unused"] = 10**400
    same(
        read_trace(dump(tmp_path / "unused.json", doc)),
        read_trace(dump(tmp_path / "a.json", sample())),
    )


def test_odd_values_give_the_same_table_sliced_or_whole(tmp_path: Path, monkeypatch) -> None:
    doc = sample()
    events = doc["traceEvents"]
    events += [
        x("odd name", 60.0, 1.0) | {"name": 3},
        x("odd cat", 61.0, 1.0) | {"cat": None},
        x("list cat", 62.0, 1.0) | {"cat": [1]},
        x("odd tid", 63.0, 1.0, tid="PyTorch Profiler"),  # type: ignore[arg-type]
        x("no ts", 64.0, 1.0) | {"ts": "soon"},
        x("gloo:broadcast", 65.0, 1.0, args={"stream": "s", "correlation": None}),
    ]
    events[5:5] = [events.pop()]  # an odd event early: in the first slice
    whole = read_trace(dump(tmp_path / "compact.json", doc))
    assert "event" in whole.dropped
    for col in ("name", "cat"):  # sorted, as pandas infers the categories of the values
        cats = list(whole.events[col].cat.categories)
        assert cats == sorted(cats) and len(cats) >= 5
    monkeypatch.setattr(reader, "CHUNK_BYTES", 200)
    monkeypatch.setattr(reader, "BLOCK_BYTES", 128)
    p = tmp_path / "kineto.json"
    p.write_bytes(kineto_layout(doc))
    same(read_trace(p), whole)


class _Counted:
    """A decoder that counts the slices it decoded and the ones it refused."""

    def __init__(self, decoder) -> None:
        self.decoder, self.done, self.refused = decoder, 0, 0

    def decode(self, buf):
        try:
            out = self.decoder.decode(buf)
        except Exception:
            self.refused += 1
            raise
        self.done += 1
        return out


def test_odd_phases_give_the_same_table_sliced_by_phase_or_whole(
    tmp_path: Path, monkeypatch
) -> None:
    """Slices are decoded by phase (flows, instants and other phases to empty objects); a
    slice with a phase outside the format's, none or a repeated one is decoded as before."""
    doc = sample()
    events = doc["traceEvents"]
    odd = [
        x("no phase", 70.0, 1.0),
        x("odd phase", 71.0, 1.0) | {"ph": "Q"},
        x("numeric phase", 72.0, 1.0) | {"ph": 5},
        thread_name(2, "late thread"),
    ]
    del odd[0]["ph"]
    flows = [
        {"ph": ph, "id": i, "pid": 1, "tid": 7, "ts": 40.0 + i, "cat": "ac2g", "name": "ac2g"}
        for i, ph in enumerate(["s", "f", "i", "C", "b", "e"])
    ]
    for i, e in enumerate([*flows, *odd]):
        events.insert(3 * i + 1, e)
    whole = read_trace(dump(tmp_path / "compact.json", doc))
    assert "late thread" in whole.thread_names.get(2, "")
    monkeypatch.setattr(reader, "CHUNK_BYTES", 200)
    monkeypatch.setattr(reader, "BLOCK_BYTES", 128)
    by_phase = _Counted(decode.BY_PHASE)
    monkeypatch.setattr(decode, "BY_PHASE", by_phase)
    p = tmp_path / "kineto.json"
    # a repeated phase: the second one is the event's (as a JSON object's last key is)
    text = kineto_layout(doc)
    first = b'"ph": "X",\n    "cat": "user_annotation"'
    assert first in text
    p.write_bytes(text.replace(first, b'"ph": "M",\n    ' + first, 1))
    same(read_trace(p), whole)
    assert by_phase.done > 0 and by_phase.refused >= 4


def test_a_large_compact_document_decoded_in_batches_gives_the_same_table(
    tmp_path: Path, monkeypatch
) -> None:
    """A document not in Kineto's indented layout (one line, e.g. re-saved by a tool) is
    decoded a batch of events at a time once large; odd entries still give their errors."""
    import overlapscope.trace.read.decode as decode

    doc = sample()
    doc["traceEvents"].append(x("odd cat", 61.0, 1.0) | {"cat": None})
    path = dump(tmp_path / "compact.json", doc)
    whole = read_trace(path)
    batches: list[int] = []
    add = decode.EventColumns.add
    monkeypatch.setattr(
        decode.EventColumns, "add", lambda b, e: batches.append(len(e)) or add(b, e)
    )
    monkeypatch.setattr(decode, "BATCH_BYTES", 300)
    same(read_trace(path), whole)
    assert len(batches) > 5 and sum(batches) == len(doc["traceEvents"])
    doc["traceEvents"].insert(3, 7)  # not an event: counted and left out
    odd = read_trace(dump(tmp_path / "odd.json", doc))
    assert "1 event with a value that is not a JSON object" in odd.dropped
    pd.testing.assert_frame_equal(odd.events, whole.events)
    doc = {"traceEvents": [], "padding": "x" * 1000}
    with pytest.raises(TraceFileError, match="no complete"):
        read_trace(dump(tmp_path / "empty.json", doc))


@pytest.mark.parametrize(
    ("values", "categories"),
    [
        (["b", None, "a", "b", None], None),
        (["comm", None, "compute", "comm"], ["compute", "comm", "wait"]),
        ([None, None], None),
        ([None, 3, "a"], None),
        ([None, float("nan"), "a", "a"], None),
        (["a", "c"], ["c", "b", "a"]),
        ([None, "x"], ["a"]),
    ],
)
@pytest.mark.filterwarnings("ignore:Constructing a Categorical with a dtype")  # (pandas' own)
def test_label_columns_are_the_categoricals_pandas_makes(values, categories) -> None:
    import numpy as np

    from overlapscope.trace.attribution import label_categorical

    array = np.asarray(values, dtype=object)
    got, want = label_categorical(array, categories), pd.Categorical(array, categories=categories)
    assert got.dtype == want.dtype and got.codes.tolist() == want.codes.tolist()


@pytest.mark.parametrize(
    ("kept", "added"),
    [
        (["gloo:send", "b", None, "a", "gloo:recv"], ["gloo:send/recv (all_gather)", "a"]),
        (["cpu_op", "cpu_op"], ["gloo_p2p"]),
        (["a", None, "c"], ["b"]),
    ],
)
def test_folded_columns_are_the_categoricals_pandas_makes(kept, added) -> None:
    """The folded p2p rows' names join the kept ones as union_categoricals would, the
    categories no kept row uses left out."""
    import numpy as np
    from pandas.api.types import union_categoricals

    from overlapscope.trace.recognize.p2p import _joined

    rows = pd.Categorical(kept)[np.asarray([v is None or "gloo" not in v for v in kept])]
    new = pd.Series(added)  # str, as the folded table infers it
    got = _joined(rows, new)
    want = union_categoricals([rows, pd.Categorical(new)], sort_categories=True)
    want = want.remove_unused_categories()
    assert got.dtype == want.dtype and got.codes.tolist() == want.codes.tolist()


@pytest.mark.parametrize(
    "dims",
    [[], [4, 4], [True, 3], [2**40, 2**40], [2**40, 2**40, 0], [2**70, 0], [-(2**62), 2], [3]],
)
def test_tensor_sizes_are_numpys_products(dims) -> None:
    """A tensor's element count is numpy's product of its dims, wrap-around included."""
    import numpy as np

    from overlapscope.trace.read.comm_args import _product

    assert _product(dims) == int(np.prod(dims))


def test_folded_transfers_queue_behind_the_threads_earlier_ones() -> None:
    """Per issue range: its sends' and receives' first start and last end, its sends' bytes;
    on one thread a transfer starts when the ones before it ended (the groupby it replaces
    gave the same rows)."""
    import numpy as np

    from overlapscope.trace.recognize.p2p import _transfers

    # rows 0-2: issue ranges (tid 1, 1, 2); 3-8: sends/receives (holder: their range)
    names = ["ovs/a", "ovs/b", "ovs/c", *["gloo:send", "gloo:recv"] * 3]
    events = pd.DataFrame(
        {
            "tid": [1, 1, 2, 1, 1, 1, 1, 2, 2],
            "name": pd.Categorical(names),
            "ts_us": [0.0, 5.0, 0.0, 1.0, 2.0, 6.0, 6.0, 1.0, 1.0],
            "dur_us": [1.0, 1.0, 1.0, 9.0, 8.0, 2.0, 3.0, 4.0, 2.0],
        }
    )
    comm = pd.DataFrame({"dims_bytes": [64, -1, 32, -1, -1, -1]}, index=range(3, 9))
    raw = RawTrace(Path("t"), 0, 2, None, None, 0, events, comm)
    p2p, issue = np.arange(3, 9), np.arange(3)
    got = _transfers(raw, p2p, issue, np.asarray([0, 0, 1, 1, 2, 2]))
    assert got.index.tolist() == [0, 1, 2]
    assert got["tid"].tolist() == [1, 1, 2]
    # range 1 (6..9) waits for range 0 (1..10) on thread 1: it starts, and ends, at 10 - its
    # own end (9) is earlier, so it is clipped to it
    assert got["start"].tolist() == [1.0, 9.0, 1.0]
    assert got["end"].tolist() == [10.0, 9.0, 5.0]
    assert got["send_bytes"].tolist() == [64.0, 32.0, -1.0]


@pytest.mark.parametrize(
    "values", [["cpu_op", "kernel", None, "cpu_op"], ["kernel"], [], [None, None]]
)
def test_category_equality_from_codes_is_the_strings(values) -> None:
    """A categorical's rows equal to a string, from its codes: as its strings compare."""
    import numpy as np

    from overlapscope.trace.recognize.table import _equals

    column = pd.Series(pd.Categorical(values, categories=["cpu_op", "kernel"]))
    want = column.astype(str).to_numpy() == "cpu_op"
    assert np.array_equal(_equals(column, "cpu_op"), want)
    assert np.array_equal(_equals(column.astype(object), "cpu_op"), want)


class _FormerStrings(columns.Strings):
    """The former ``add``: the slice's distinct values found first, then every row looked
    up (the reference for the codes given as the values are met)."""

    def __init__(self) -> None:
        self.index, self.parts = {}, []

    def add(self, values):
        import numpy as np

        if not set(map(type, values)) <= {str}:
            self.parts.append(values)
            return None
        index = self.index
        for v in dict.fromkeys(values):
            index.setdefault(v, len(index))
        codes = np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))
        self.parts.append(codes)
        return codes


@pytest.mark.parametrize("seed", range(30))
def test_string_columns_are_the_former_codes_and_categoricals(seed: int) -> None:
    """Slices of strings, some with values that are not strings (numbers equal to each
    other, None, unhashable lists): the same codes per slice and the same categorical."""
    import random

    rng = random.Random(seed)
    pool = ["b", "a", "nccl", "", "aten::mm", "c"]
    odd = [1, True, 1.0, None, [1], 2.5, "x"]
    got, want = columns.Strings(), _FormerStrings()
    for _ in range(rng.randint(0, 6)):
        values = [rng.choice(pool) for _ in range(rng.randint(0, 8))]
        if rng.random() < 0.3:
            values.insert(rng.randint(0, len(values)), rng.choice(odd))
        a, b = got.add(values), want.add(list(values))
        assert (a is None) == (b is None) and (a is None or a.tolist() == b.tolist())
        assert list(got.index.items()) == list(want.index.items())
    g, w = got.categorical(), want.categorical()
    assert g.dtype == w.dtype and g.codes.tolist() == w.codes.tolist()


def _former_comm_frame(rows: dict, idx) -> pd.DataFrame:
    """comm_args.comm_frame before its numbers were converted at once (the reference)."""
    import numpy as np

    out = pd.DataFrame(rows, index=pd.Index(idx, dtype=np.int64))
    for col in ("in_nelems", "out_nelems", "group_size", "seq_arg"):
        out[col] = pd.to_numeric(out[col], errors="coerce").astype("float64")
    for col in ("dims_bytes", "first_bytes", "first_numel", "second_numel"):
        out[col] = out[col].astype(np.int64)
    for col in ("coll_name", "dtype", "pg_name", "pg_desc", "pg_ranks"):
        out[col] = pd.Series(rows[col], index=out.index, dtype=object)
    return out


@pytest.mark.parametrize(
    "numbers",
    [
        [1, 2, 3],
        [1, None, 2.5],
        [None, None, None],
        [2**63 + 5, 2**62, None],
        [1.5, float("nan"), 7],
        ["12", 3, None],
        [True, 4, None],
        [[1, 2], "x", 3],
        [],
    ],
)
def test_collective_arguments_table_is_the_former_one(numbers) -> None:
    import numpy as np

    from overlapscope.trace.read.comm_args import COMM_FIELDS, comm_frame

    n = len(numbers)
    rows = {k: list(numbers) for k in ("in_nelems", "out_nelems", "group_size", "seq_arg")}
    rows |= {"coll_name": ["allgather", None, ["x"]][:n], "dtype": ["Float", 3, None][:n]}
    rows |= {"pg_name": ["0", None, "1"][:n], "dims_bytes": [-1, 64, 2**40][:n]}
    rows |= {"first_bytes": [-1, 32, 2**39][:n], "first_numel": [-1, 8, 2**37][:n]}
    rows |= {"second_numel": [-1, 4, 2**36][:n], "pg_desc": ["default_pg", None, "x"][:n]}
    rows |= {"pg_ranks": ["0,1", None, "2"][:n]}
    rows = {k: rows[k] for k in COMM_FIELDS}
    idx = np.arange(n, dtype=np.int64) * 7
    pd.testing.assert_frame_equal(comm_frame(rows, idx), _former_comm_frame(rows, idx))
