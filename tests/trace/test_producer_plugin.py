"""A producer is one module (issue 31, point 4): a toy DeepSpeed ZeRO-3 producer, written
here and registered with one call, reads traces with its range names and gives per-unit
figures, with nothing else of overlapscope changed.

The toy's range names follow DeepSpeed ZeRO-3's own functions: ``fetch_sub_module`` gathers
a module's parameters (all-gather), ``reduce_partition`` reduce-scatters its gradients; the
thread waits for either in a ``wait`` range. Written as ``zero3::<what>[<module>]``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from overlapscope.analysis.api import analyze
from overlapscope.arrays import BoolArray, IntArray
from overlapscope.phases import Lane, Phase
from overlapscope.trace import producers
from overlapscope.trace.attribution import Labels, RowContext, holder
from overlapscope.trace.producers.base import RangeRule
from overlapscope.trace.run.loader import load_run
from tests.trace.kineto import GLOO_TID, gloo, step, thread_name, trace, write, x

_NAME = re.compile(r"^zero3::(?P<what>[a-z_]+)\[(?P<module>[^\]]+)\]$")
_RULES = {
    "fetch_sub_module": RangeRule(Lane.ISSUE, Phase.AG_FWD),
    "wait_fetch": RangeRule(Lane.WAIT, Phase.AG_FWD_WAIT),
    "reduce_partition": RangeRule(Lane.ISSUE, Phase.RS),
    "wait_reduce": RangeRule(Lane.WAIT, Phase.RS_WAIT),
}


class Zero3:
    """DeepSpeed ZeRO-3 (a toy): its ranges name the module; a collective belongs to the
    range it was issued in."""

    name = "deepspeed-zero3"
    infers_schedule = False

    def recognizes(self, cats: list[str], present: BoolArray) -> bool:
        return any(present[i] and self.rule(c) is not None for i, c in enumerate(cats))

    def rule(self, name: str) -> RangeRule | None:
        m = _NAME.match(name)
        rule = _RULES.get(m["what"]) if m else None
        return RangeRule(rule.lane, rule.phase, m["module"]) if m and rule else None

    def label(
        self, ctx: RowContext, out: Labels, cats: list[str], codes: IntArray, warnings: list[str]
    ) -> None:
        issue = np.flatnonzero((out.lane == Lane.ISSUE.value) & (out.unit != None))  # noqa: E711
        held = holder(ctx, issue)
        ok = held >= 0
        out.phase[ctx.comm_rows[ok]] = out.phase[held[ok]]
        out.unit[ctx.comm_rows[ok]] = out.unit[held[ok]]


@pytest.fixture
def zero3() -> Iterator[Zero3]:
    producer = producers.register(Zero3())
    try:
        yield producer
    finally:
        producers.unregister(producer.name)


def zero3_rank() -> list[dict]:
    """One step [0, 200) of one rank, two modules:

    training thread: fetch l0 [0,2) wait [2,20) | mm [20,60) | fetch l1 [60,62) mm [62,100)
                     reduce l1 [100,101) wait [101,130)
    gloo thread:     all_gather l0 [1,20) all_gather l1 [61,70) reduce_scatter l1 [100.5,130)
    """
    return [
        thread_name(GLOO_TID, "pt_gloo_runloop"),
        step(1, 0, 200),
        x("zero3::fetch_sub_module[layers.0]", 0, 2),
        x("zero3::wait_fetch[layers.0]", 2, 18),
        x("aten::mm", 20, 40, cat="cpu_op"),
        x("zero3::fetch_sub_module[layers.1]", 60, 2),
        x("aten::mm", 62, 38, cat="cpu_op"),
        x("zero3::reduce_partition[layers.1]", 100, 1),
        x("zero3::wait_reduce[layers.1]", 101, 29),
        gloo("all_gather", 1, 19, 100),
        gloo("all_gather", 61, 9, 100),
        gloo("reduce_scatter", 100.5, 29.5, 200),
    ]


def test_a_registered_producer_gives_per_unit_figures(tmp_path: Path, zero3: Zero3) -> None:
    write(tmp_path / "rank-0.pt.trace.json", trace(0, 1, zero3_rank()))
    a = analyze(load_run(tmp_path))
    assert a.summary.frameworks == {0: "deepspeed-zero3"}
    units = a.units.astype({"unit": str, "phase": str, "kind": str}).set_index(["unit", "phase"])
    assert set(units.index) == {("layers.0", "ag_fwd"), ("layers.1", "ag_fwd"), ("layers.1", "rs")}
    assert units.loc[("layers.1", "rs"), "kind"] == "reduce_scatter"
    # exposed: all of layers.0's gather (no compute beside it), 1 µs of layers.1's (the mm
    # from 62 on hides the rest), all of the reduce-scatter
    exposed = units["exposed_per_step_us"]
    assert exposed.to_dict() == pytest.approx(
        {("layers.0", "ag_fwd"): 19.0, ("layers.1", "ag_fwd"): 1.0, ("layers.1", "rs"): 29.5}
    )
    assert a.ranks.loc[0, "exposed_comm_total_us"] == pytest.approx(19 + 1 + 29.5)
    # the wait ranges are the thread's waits on the unit's collectives
    waits = a.timeline[a.timeline["phase"].astype(str).str.endswith(".wait")]
    assert sorted(zip(waits["unit"].astype(str), waits["dur_us"], strict=True)) == [
        ("layers.0", 18.0),
        ("layers.1", 29.0),
    ]


def test_without_the_producer_the_trace_is_generic(tmp_path: Path) -> None:
    """The same trace read before the producer is registered: no unit is known."""
    write(tmp_path / "rank-0.pt.trace.json", trace(0, 1, zero3_rank()))
    a = analyze(load_run(tmp_path))
    assert a.summary.frameworks == {0: "generic"}
    assert a.units["unit"].isna().all()


def test_two_producers_of_one_name_are_refused(zero3: Zero3) -> None:
    with pytest.raises(ValueError, match="registered already"):
        producers.register(Zero3())
    with pytest.raises(ValueError, match="built-in"):
        producers.unregister("fsdp2")
