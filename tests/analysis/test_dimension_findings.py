"""Findings per parallel dimension (issue 44 point 6) on the real CPU/gloo fixtures
``traces/parallel-*``: exposed reduce-scatters, HSDP's replica all-reduces and TP
communication each get a finding, ranked with the others by its stake, with levers in
torch's own API words, and no FSDP lever aimed at a TP collective."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from overlapscope.analysis import analyze
from overlapscope.analysis.api import RunAnalysis
from overlapscope.analysis.findings import Finding, FindingKind
from overlapscope.trace.run.loader import load_run

REPO = Path(__file__).resolve().parents[2]
KEY = ["group", "step", "seq"]


@cache
def _run(layout: str) -> RunAnalysis:
    return analyze(load_run(REPO / "traces" / f"parallel-{layout}"))


def _finding(layout: str, kind: FindingKind) -> Finding:
    (f,) = [f for f in _run(layout).findings if f.kind is kind]
    return f


def _stake_by_hand(layout: str, phases: set[str]) -> float:
    """Mean over the ranks that run them of the phases' exposed transfer per step, from the
    per-rank rows of each collective (2 counted steps)."""
    a = _run(layout)
    rows = a.collective_ranks.merge(a.collectives[[*KEY, "phase"]], on=KEY)
    mine = rows[rows["phase"].astype(object).isin(phases)]
    return float(mine.groupby("rank")["exposed_transfer_us"].sum().mean()) / 2


@pytest.mark.parametrize(
    ("layout", "kind", "phases"),
    [
        ("fsdp2", FindingKind.REDUCE_SCATTER_EXPOSED, {"rs"}),
        ("hsdp", FindingKind.REDUCE_SCATTER_EXPOSED, {"rs"}),
        ("hsdp", FindingKind.REPLICA_ALL_REDUCE_EXPOSED, {"ar_rep"}),
        ("fsdp-tp", FindingKind.TP_EXPOSED, {"tp_fwd", "tp_bwd"}),
        ("fsdp-tp-sp", FindingKind.TP_EXPOSED, {"tp_fwd", "tp_bwd"}),
    ],
)
def test_stake_is_the_phases_exposed_transfer(
    layout: str, kind: FindingKind, phases: set[str]
) -> None:
    assert _finding(layout, kind).stake_us == pytest.approx(_stake_by_hand(layout, phases), abs=0.5)


@pytest.mark.parametrize("layout", ["fsdp2", "hsdp", "fsdp-tp", "fsdp-tp-sp"])
def test_ranked_with_the_others(layout: str) -> None:
    stakes = [f.stake_us for f in _run(layout).findings]
    assert stakes == sorted(stakes, reverse=True)


def test_hsdp_levers_name_torchs_api() -> None:
    change = _finding("hsdp", FindingKind.REPLICA_ALL_REDUCE_EXPOSED).change
    assert "MixedPrecisionPolicy(reduce_dtype=" in change
    assert "set_requires_all_reduce(False)" in change
    assert "fewer replicas (2 now)" in change
    rs = _finding("hsdp", FindingKind.REDUCE_SCATTER_EXPOSED).change
    assert "set_requires_gradient_sync(False)" in rs


def test_tp_levers_are_tps_alone() -> None:
    tp = _finding("fsdp-tp", FindingKind.TP_EXPOSED).change
    assert "SequenceParallel()" in tp and "_micro_pipeline_tp" in tp
    sp = _finding("fsdp-tp-sp", FindingKind.TP_EXPOSED).change
    assert sp.startswith("already sequence parallel") and "_micro_pipeline_tp" in sp
    for text in (tp, sp):
        assert "fully_shard" not in text and "MixedPrecision" not in text
        assert "prefetch" not in text and "set_requires" not in text
    for f in _run("fsdp-tp").findings:
        if f.kind is not FindingKind.TP_EXPOSED:
            assert "SequenceParallel" not in f.change and "micro_pipeline" not in f.change


@pytest.mark.parametrize(
    ("layout", "kind", "phases", "part"),
    [
        ("hsdp", FindingKind.REDUCE_SCATTER_EXPOSED, {"rs"}, "backward"),
        ("hsdp", FindingKind.REPLICA_ALL_REDUCE_EXPOSED, {"ar_rep"}, "backward"),
        ("fsdp-tp", FindingKind.TP_EXPOSED, {"tp_fwd", "tp_bwd"}, None),
    ],
)
def test_evidence_is_the_phases_collectives(
    layout: str, kind: FindingKind, phases: set[str], part: str | None
) -> None:
    """Each item is one rank's collective of the finding's phases, most exposed first; the
    finding's ranks and steps are those of every exposed one, and its phase is the part of
    the step holding most of the exposed transfer (computed here for TP, which has both)."""
    a, f = _run(layout), _finding(layout, kind)
    rows = a.collective_ranks.merge(a.collectives[[*KEY, "phase", "kind", "unit"]], on=KEY)
    mine = rows[rows["phase"].astype(object).isin(phases) & (rows["exposed_transfer_us"] > 0)]
    assert f.ranks == tuple(sorted(mine["rank"].unique()))
    assert f.steps == tuple(sorted(mine["step"].unique()))
    top = mine.sort_values("exposed_transfer_us", ascending=False, kind="stable").iloc[0]
    first = f.evidence[0]
    assert (first.rank, first.step) == (top["rank"], top["step"])
    assert first.dur_us == pytest.approx(top["exposed_transfer_us"])
    assert first.gpu_op == f"{top['kind']} of {top['unit']}"
    durs = [e.dur_us for e in f.evidence]
    assert durs == sorted(durs, reverse=True)
    if part is None:
        by = mine.assign(
            part=mine["phase"].astype(object).map({"tp_fwd": "forward", "tp_bwd": "backward"})
        )
        part = str(by.groupby("part")["exposed_transfer_us"].sum().idxmax())
    assert f.phase == part
