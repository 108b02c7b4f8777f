"""The critical-path paragraph reads correctly for every kind of link (issue #32, point 5):
what "most of it" is and what a 10% shorter link saves name the link itself, never "that
collective" after a sentence that named none."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from overlapscope.analysis.critical_path.path import LINK_COLUMNS, STEP_COLUMNS, CriticalPath
from overlapscope.analysis.critical_path.report import link_name, path_paragraph
from overlapscope.analysis.segments import SEGMENT_KINDS

# (kind, unit, phase, group, seq) -> how the paragraph names the link
LINKS = {
    "compute": (("compute", "blocks.1", "fwd", None, -1), "rank 0's forward of blocks.1"),
    "comm": (
        ("comm", "blocks.2", "rs", "gloo", 3),
        "the reduce-scatter of blocks.2 (group gloo, step 2, seq 3) on every rank",
    ),
    "comm-unmatched": (("comm", "blocks.2", "rs", "gloo", -1), "rank 0's exposed reduce-scatter"),
    "wait": (
        ("wait", "blocks.3", "ag_bwd", None, -1),
        "rank 0's wait for the backward all-gather of blocks.3",
    ),
    "wait-unnamed": (("wait", None, None, None, -1), "rank 0's wait for communication"),
    "idle": (("idle", None, None, None, -1), "rank 0's idle time (nothing traced)"),
}


def one_link_path(kind: str, unit: object, phase: object, group: object, seq: int) -> CriticalPath:
    link = {
        "step": 2, "order": 0, "rank": 0, "kind": kind, "unit": unit, "phase": phase,
        "group": group, "seq": seq, "start_us": 0.0, "end_us": 100.0, "dur_us": 100.0,
        "saving_us": 7.0,
    }  # fmt: skip
    step = {c: 0.0 for c in STEP_COLUMNS}
    step.update(step=2, end_us=100.0, step_us=100.0, path_us=100.0, num_links=1, num_hops=0)
    step[f"{kind}_us"] = 100.0
    return CriticalPath(pd.DataFrame([link], columns=LINK_COLUMNS), pd.DataFrame([step]))


def test_every_segment_kind_is_covered() -> None:
    assert {v[0][0] for v in LINKS.values()} == set(SEGMENT_KINDS)


@pytest.mark.parametrize("case", list(LINKS), ids=list(LINKS))
def test_paragraph_names_the_link_it_shortens(case: str) -> None:
    (kind, unit, phase, group, seq), named = LINKS[case]
    text = path_paragraph(one_link_path(kind, unit, phase, group, seq))
    assert "that collective" not in text
    most = text.split("Most of it: ")[1].split(", 100 µs/step")[0]
    assert most == link_name(0, kind, unit, phase)
    shortened = text.split("Shortening ")[1].split(" by 10%")[0]
    assert shortened.startswith(named), shortened
    if seq < 0 or kind != "comm":  # a link of one rank: its step and length
        assert shortened.endswith("(step 2, 100 µs)"), shortened
    assert "saves 7 µs of the step (replayed)." in text


def test_link_names_read_as_english() -> None:
    assert link_name(3, "comm", None, None) == "rank 3's exposed communication"
    assert link_name(1, "compute", "blocks.0", "bwd") == "rank 1's backward of blocks.0"
    assert link_name(1, "compute", None, None) == "rank 1's compute"
    assert link_name(0, "idle", math.nan, math.nan) == "rank 0's idle time (nothing traced)"
