"""The pieces of the writer on small inputs: the gzip of parts, packing slices into rows,
cutting transfers at the exposed intervals, the path's hops, reading an export back."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import os
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from overlapscope.perfetto.deflate import (
    GZIP_HEADER,
    PartWriter,
    combine,
    crc32_combine,
    trailer,
)
from overlapscope.perfetto.path import hops
from overlapscope.perfetto.tracks import exposed_pieces, rows
from overlapscope.trace.read.merged import is_merged
from overlapscope.trace.run.loader import load_run
from tests.conftest import REPO
from tests.perfetto.conftest import export


@pytest.mark.parametrize("sizes", [(0, 5), (7, 0, 3_000_000), (1, 1, 1), (65_537, 12)])
def test_parts_make_one_gzip_member(sizes: tuple[int, ...]) -> None:
    texts = [os.urandom(n // 2) + b"x" * (n - n // 2) for n in sizes]
    out = io.BytesIO()
    out.write(GZIP_HEADER)
    sums = []
    for i, text in enumerate(texts):
        w = PartWriter(out, final=i == len(texts) - 1)
        w.write(text)
        sums.append(w.close())
    out.write(trailer(combine(sums)))
    d = zlib.decompressobj(31)
    assert d.decompress(out.getvalue()) == b"".join(texts)
    assert d.eof and not d.unused_data
    assert gzip.decompress(out.getvalue()) == b"".join(texts)


def test_crc32_combine_is_zlibs() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.bytes(int(rng.integers(0, 5000)))
        b = rng.bytes(int(rng.integers(0, 5000)))
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_rows_never_overlap_and_reuse_free_rows() -> None:
    starts = np.array([0, 5, 10, 10, 12, 30])
    ends = np.array([10, 12, 20, 11, 13, 31])
    row = rows(starts, ends)
    for r in set(row.tolist()):
        spans = sorted(zip(starts[row == r], ends[row == r], strict=True))
        assert all(b0 <= a1 for (_, b0), (a1, _) in itertools.pairwise(spans))
    assert row.max() == 2  # three overlap at 10-11, never more
    assert row[5] == 0  # a free row is taken again


def test_exposed_pieces_cut_each_transfer_at_the_intervals() -> None:
    comm = pd.DataFrame(
        {"ts_us": [0.0, 8.0, 40.0], "end_us": [10.0, 25.0, 50.0], "unit": ["a", "b", "c"]}
        | {"phase": ["ag_fwd"] * 3, "kind": ["all_gather"] * 3}
    )
    exposed = pd.DataFrame({"start_us": [2.0, 9.0, 22.0], "end_us": [4.0, 12.0, 30.0]})
    pieces = exposed_pieces(comm, exposed)
    got = list(zip(pieces["unit"], pieces["start_us"], pieces["end_us"], strict=True))
    assert got == [("a", 2, 4), ("a", 9, 10), ("b", 9, 12), ("b", 22, 25)]


def test_hops_are_the_changes_of_rank() -> None:
    links = pd.DataFrame(
        {
            "step": [1, 1, 1, 1, 2, 2],
            "order": [0, 1, 2, 3, 0, 1],  # 0: the last link
            "rank": [0, 1, 1, 0, 3, 3],
            "start_us": [30.0, 20.0, 10.0, 0.0, 50.0, 40.0],
            "end_us": [40.0, 30.0, 20.0, 10.0, 60.0, 50.0],
        }
    )
    table, short = hops(links)
    assert short == 0
    pairs = list(
        zip(
            table["from_rank"],
            table["from_order"],
            table["to_rank"],
            table["to_order"],
            strict=True,
        )
    )
    assert pairs == [(0, 3, 1, 2), (1, 1, 0, 0)]
    assert len(set(table["flow_id"])) == 2


def test_a_re_saved_export_still_reads_back(tmp_path: Path, out_dir) -> None:  # type: ignore[no-untyped-def]
    """Another tool's layout (indented JSON, one event over many lines) is read whole."""
    done = export(REPO / "traces" / "backward_pre", out_dir)
    doc = json.loads(gzip.decompress(done.path.read_bytes()))
    resaved = tmp_path / "resaved.json.gz"
    resaved.write_bytes(gzip.compress(json.dumps(doc, indent=2).encode()))
    assert is_merged(resaved)
    again = load_run(resaved, progress=False)
    assert [r.rank for r in again.ranks] == [0, 1]
    assert len(again.events) == len(done.run.events)


def test_a_trace_is_not_an_export() -> None:
    assert not is_merged(REPO / "traces" / "backward_pre" / "rank-0.pt.trace.json.gz")


def test_gpu_idle_by_cause_where_the_analysis_has_it(tmp_path: Path, out_dir) -> None:  # type: ignore[no-untyped-def]
    """The analysis' idle gaps by cause (its figure ``idle_gaps``, issue 30) make a "GPU
    idle" track per rank, one slice a gap, drawn where and as long as the gap; a CPU run's
    ranks have no GPU and no such track."""
    import dataclasses

    from overlapscope.perfetto.export import write_perfetto
    from tests.perfetto.chrome_trace import read_trace

    assert not export(REPO / "traces" / "backward_pre", out_dir).trace.ours("GPU idle")
    done = export(REPO / "traces" / "gpu-engine-gloo2-backward_pre", out_dir)
    assert len(done.trace.ours("GPU idle")) == len(done.analysis.idle_gaps) > 0
    steps = done.analysis.steps
    first = steps.iloc[0]
    start = float(first["start_us"])
    gaps = pd.DataFrame(
        {
            "rank": [int(first["rank"])] * 2,
            "step": [int(first["step"])] * 2,
            "start_us": [start + 10.0, start + 30.0],
            "end_us": [start + 20.0, start + 45.5],
            "cause": ["host_bound", "sync"],
        }
    )
    analysis = dataclasses.replace(done.analysis, idle_gaps=gaps)
    out = tmp_path / "idle.json.gz"
    write_perfetto(out, analysis, done.run)
    idle = read_trace(out).ours("GPU idle")
    assert [(e["name"], e["dur"]) for e in sorted(idle, key=lambda e: e["ts"])] == [
        ("idle: host_bound", 10.0),
        ("idle: sync", 15.5),
    ]
    assert {e["pid"] for e in idle} == {int(first["rank"]) + 1}
