"""A syntax error mid-file is reported where it is (issue #32, point 5): the byte offset the
message gives holds the bad token, and ``traceEvents[K]`` is the event that holds it: early
and late in a shipped sample rank (torch's layout, 2.6 MB of text, gzipped or not) and with
characters of several bytes before it."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from overlapscope.trace.read.parse import TraceFileError, read_trace

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "traces" / "none" / "rank-0.pt.trace.json.gz"
_WHERE = re.compile(r"invalid JSON at byte (\d+) in traceEvents\[(\d+)\]")


def _event_starts(text: bytes) -> list[int]:
    """Where each event of torch's layout starts (its opening brace)."""
    first = text.index(b"{", text.index(b'"traceEvents"'))
    return [first] + [m.start() + 5 for m in re.finditer(rb"\n  },\n  {", text)]


def _with_nan(text: bytes, event: int) -> tuple[bytes, int]:
    """``text`` with the ``dur`` of event ``event`` a NaN token, and the NaN's byte offset."""
    starts = _event_starts(text)
    at = text.index(b'"dur": ', starts[event]) + len(b'"dur": ')
    end = re.compile(rb"[,\n]").search(text, at)
    assert end is not None and at < starts[event + 1]
    return text[:at] + b"NaN" + text[end.start() :], at


def _reported(path: Path) -> tuple[int, int]:
    with pytest.raises(TraceFileError) as e:
        read_trace(path)
    m = _WHERE.search(str(e.value))
    assert m is not None, str(e.value)
    return int(m[1]), int(m[2])


@pytest.mark.parametrize("gz", [True, False], ids=["gz", "json"])
@pytest.mark.parametrize("position", [0.1, 0.9], ids=["early", "late"])
def test_a_nan_in_a_sample_rank_is_named_at_its_byte_and_event(tmp_path, gz, position):
    text = gzip.decompress(SAMPLE.read_bytes())
    starts = _event_starts(text)
    event = next(
        k for k in range(int(position * len(starts)), len(starts) - 1)
        if b'"dur": ' in text[starts[k] : starts[k + 1]]
    )  # fmt: skip
    bad, at = _with_nan(text, event)
    p = tmp_path / ("r.json.gz" if gz else "r.json")
    p.write_bytes(gzip.compress(bad) if gz else bad)
    assert _reported(p) == (at, event)


def test_the_offset_counts_bytes_not_characters(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "µ-op ✓" * 20, "tid": 1, "ts": i, "dur": 1}
        for i in range(6)
    ]
    text = json.dumps({"traceEvents": events}, ensure_ascii=False, indent=2).encode()
    nth = [m.start() for m in re.finditer(rb'"dur": 1', text)][4] + len(b'"dur": ')
    p = tmp_path / "r.json"
    p.write_bytes(text[:nth] + b"NaN" + text[nth + 1 :])
    assert _reported(p) == (nth, 4)
