"""``--steps`` and ``--ranks``: what the file keeps, and that it still reads back."""

from __future__ import annotations

import numpy as np
import pytest

from overlapscope.analysis.api import analyze
from overlapscope.perfetto.numbers import parse_numbers
from overlapscope.perfetto.select import step_spans
from overlapscope.trace.run.loader import load_run
from tests.conftest import REPO
from tests.perfetto.conftest import export
from tests.perfetto.test_export import PARTITION

RUN = REPO / "traces" / "backward_pre"  # 2 ranks, steps 2 and 3 (traces/README.md)
GPU_RUN = REPO / "traces" / "gpu-engine-gloo2-backward_pre"


@pytest.mark.parametrize("source", [RUN, GPU_RUN], ids=["cpu", "gpu"])
def test_steps_keep_the_chosen_steps_whole(source, out_dir) -> None:  # type: ignore[no-untyped-def]
    """Every event of step 3 is in the file, nothing outside step 3's span across ranks is,
    the path and the findings are step 3's only."""
    whole = export(source, out_dir)
    three = export(source, out_dir, steps=(3,))
    window = three.trace.top["overlapscope_export"]
    assert window["steps"] == [3]
    spans = [e for e in three.trace.events if e["ph"] == "X" and e.get("cat") != "overlapscope"]
    assert 0 < len(spans) < len([e for e in whole.trace.events if e["ph"] == "X"])
    in_step = {
        (e["pid"], e["name"], round(e["ts"], 3))
        for e in whole.trace.events
        if e["ph"] == "X" and e["name"] == "ProfilerStep#3"
    }
    kept = {(e["pid"], e["name"], round(e["ts"], 3)) for e in spans}
    assert in_step <= kept
    path = three.analysis.path
    assert path is not None
    span = step_spans(three.analysis.steps, path.steps).set_index("step").loc[3]
    assert all(e["ts"] < span["end_us"] and e["ts"] + e["dur"] > span["start_us"] for e in spans)
    path_steps = {e["args"]["step"] for e in three.trace.ours("critical path")}
    assert path_steps == {3}
    marks = [e for e in three.trace.events if e["ph"] == "i" and e.get("cat") == "overlapscope"]
    assert {m["args"]["step"] for m in marks} <= {3}
    assert len(marks) == len(three.analysis.findings)  # each finding once, at step 3


BUSY = ["compute_us", "exposed_comm_us", "exposed_memory_us", "other_us"]
READ_BACK = [
    pytest.param(RUN, 3, PARTITION, id="cpu step 3"),
    pytest.param(GPU_RUN, 4, PARTITION, id="gpu step 4"),
    # A GPU step's window ends at the next step's first kernel, which this file does not
    # hold: its step time and idle end where its own work does.
    pytest.param(GPU_RUN, 3, BUSY, id="gpu step 3"),
]


@pytest.mark.parametrize(("source", "step", "figures"), READ_BACK)
def test_steps_file_reads_back_as_that_step(source, step, figures, out_dir) -> None:  # type: ignore[no-untyped-def]
    """Read back, the file of one step has that step only on every rank (a neighbouring
    step's range reaching into its span is left out, not read as a fragment of that step),
    with the source's partition."""
    one = export(source, out_dir, steps=(step,))
    again = analyze(load_run(one.path, progress=False))
    assert {r: list(s) for r, s in again.counted_steps.items()} == {0: [step], 1: [step]}
    a = one.analysis.steps[one.analysis.steps["step"] == step].sort_values("rank")
    b = again.steps.sort_values("rank")
    assert b["step"].tolist() == [step, step]
    np.testing.assert_allclose(b[figures].to_numpy(), a[figures].to_numpy(), atol=1e-6)


def test_ranks_keep_the_chosen_ranks(out_dir) -> None:  # type: ignore[no-untyped-def]
    """Only rank 1's process (and the run's); where the path goes to rank 0, an instant says
    so instead of an arrow with one end; rank 1 reads back as it was."""
    one = export(RUN, out_dir, ranks=(1,))
    ranks = {a.get("rank") for a in one.trace.processes.values()}
    assert ranks == {1, None}
    assert not [
        e for e in one.trace.events if e["ph"] in "sf" and e.get("cat") == "overlapscope.path"
    ]
    hops = [e for e in one.trace.events if e["ph"] == "i" and "not in this file" in e["name"]]
    assert hops and all(e["args"]["rank"] == 0 for e in hops)
    again = analyze(load_run(one.path, progress=False))
    assert again.summary.ranks == (1,)
    a = one.analysis.steps[one.analysis.steps["rank"] == 1].reset_index(drop=True)
    np.testing.assert_allclose(
        again.steps[PARTITION].to_numpy(), a[PARTITION].to_numpy(), atol=1e-6
    )


@pytest.mark.parametrize(
    ("text", "numbers"),
    [("3", (3,)), ("0-3,8", (0, 1, 2, 3, 8)), (" 2 , 2,1", (1, 2)), ("5-5", (5,))],
)
def test_parse_numbers(text: str, numbers: tuple[int, ...]) -> None:
    assert parse_numbers(text) == numbers


@pytest.mark.parametrize("text", ["", "a", "3-1", "-2", "1,,2", "0-99999999"])
def test_parse_numbers_refuses(text: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        parse_numbers(text)
