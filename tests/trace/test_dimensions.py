"""Parallel dimensions, HSDP's replicate all-reduce and TP's phases, and waits wherever they
sit (issue 44 points 4 and 5), on the real CPU/gloo fixtures ``traces/parallel-*``.

Exposure is checked against interval arithmetic done here on the event table: a
collective's exposed time is its duration less the part the rank's compute covers (where
collectives do not overlap one another, as the test checks first)."""

from __future__ import annotations

from collections import Counter
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from overlapscope.analysis import analyze
from overlapscope.analysis.api import RunAnalysis
from overlapscope.phases import Phase, Row
from overlapscope.trace.groups.dimensions import dimension, group_dimensions
from overlapscope.trace.run.loader import RunTraces, load_run

REPO = Path(__file__).resolve().parents[2]
BLOCKS = ["blocks.0", "blocks.1", "blocks.2", "blocks.3"]


@cache
def _load(layout: str) -> RunTraces:
    return load_run(REPO / "traces" / f"parallel-{layout}")


@cache
def _run(layout: str) -> RunAnalysis:
    return analyze(_load(layout))


@pytest.mark.parametrize(
    ("desc", "kinds", "shards", "want"),
    [
        ("mesh_shard", {"all_gather", "reduce_scatter"}, True, "fsdp_shard"),
        ("mesh_replicate", {"all_reduce"}, True, "hsdp_replicate"),
        ("mesh_replicate", {"all_reduce"}, False, "ddp"),
        ("mesh_dp", {"all_gather", "reduce_scatter"}, True, "fsdp_shard"),
        ("mesh_dp", {"all_reduce"}, False, "ddp"),
        ("mesh_dp_shard", {"all_gather"}, True, "fsdp_shard"),
        ("mesh_dp_replicate", {"all_reduce"}, True, "hsdp_replicate"),
        ("mesh_tp", {"all_reduce"}, True, "tp"),
        ("mesh_pp", {"send"}, True, "pp"),
        ("mesh_ep", {"all_to_all"}, True, "ep"),
        ("mesh_cp", {"all_gather"}, True, "cp"),
        ("undefined", {"all_reduce"}, False, "ddp"),
    ],
)
def test_a_groups_description_names_its_dimension(
    desc: str, kinds: set[str], shards: bool, want: str
) -> None:
    assert dimension(desc, kinds, shards) == want


def test_hsdp_rank_groups_are_shard_and_replicate() -> None:
    ev = _load("hsdp").events
    c = ev[(ev["lane"] == "comm") & (ev["rank"] == 2)]
    dims = group_dimensions(
        c["group"].astype(object).to_numpy(), c["kind"].astype(object).to_numpy()
    )
    assert dims == {"mesh_shard[2,3]": "fsdp_shard", "mesh_replicate[0,2]": "hsdp_replicate"}


def test_tp_groups_are_tp_and_dp_is_fsdps() -> None:
    ev = _load("fsdp-tp").events
    c = ev[(ev["lane"] == "comm") & (ev["rank"] == 1)]
    dims = group_dimensions(
        c["group"].astype(object).to_numpy(), c["kind"].astype(object).to_numpy()
    )
    assert dims == {"mesh_dp[1,3]": "fsdp_shard", "mesh_tp[0,1]": "tp"}


def _counted(layout: str, rank: int) -> pd.DataFrame:
    ev = _load(layout).events  # (one rank's intervals: its own clock will do)
    return ev[(ev["rank"] == rank) & (ev["step"].isin([2, 3]))]


def _union(starts: np.ndarray, ends: np.ndarray) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(zip(starts.tolist(), ends.tolist(), strict=True)):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(a, b) for a, b in out]


def _covered(s: float, e: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(e, b) - max(s, a)) for a, b in spans)


def _exposed_by_hand(layout: str, rank: int, phases: list[str]) -> float:
    """µs per step of the rank's collectives of ``phases`` that its compute does not cover
    (2 counted steps)."""
    ev = _counted(layout, rank)
    comm = ev[ev["lane"] == "comm"]
    mine = comm[comm["phase"].astype(object).isin(phases)]
    others = comm.drop(mine.index)
    for s, e in zip(mine["ts_us"], mine["end_us"], strict=True):  # the premise: no overlap
        assert _covered(s, e, _union(others["ts_us"].to_numpy(), others["end_us"].to_numpy())) == 0
    compute = ev[ev["lane"] == "compute"]
    spans = _union(compute["ts_us"].to_numpy(), compute["end_us"].to_numpy())
    total = sum(
        e - s - _covered(s, e, spans) for s, e in zip(mine["ts_us"], mine["end_us"], strict=True)
    )
    return total / 2


def _exposed(layout: str, rank: int, phases: list[str]) -> float:
    u = _run(layout).units
    mine = u[(u["rank"] == rank) & u["phase"].astype(object).isin(phases)]
    return float(mine["exposed_per_step_us"].sum())


def test_tp_exposure_per_step_matches_the_hand_computation() -> None:
    """With the forward waits (``_c10d_functional::wait_tensor`` inside ``aten::add`` >
    ``PythonSubclass``) counted as waits, not compute."""
    tp = [Phase.TP_FWD.value, Phase.TP_BWD.value]
    want = _exposed_by_hand("fsdp-tp", 1, tp)
    assert want > 0
    assert _exposed("fsdp-tp", 1, tp) == pytest.approx(want, abs=0.5)  # (µs; main: 5,832)


def test_functional_waits_are_waits_and_their_holders_not_compute() -> None:
    ev = _load("fsdp-tp").events
    ev = ev[ev["rank"] == 1]
    waits = ev[ev["name"] == "_c10d_functional::wait_tensor"]
    assert len(waits) == 16 and (waits["lane"] == "wait").all()
    compute = ev[(ev["lane"] == "compute") & (ev["tid"] == waits["tid"].iloc[0])]
    for s, e in zip(waits["ts_us"], waits["end_us"], strict=True):
        holds = (compute["ts_us"] <= s) & (compute["end_us"] >= e)
        assert not holds.any()


def test_tp_collectives_belong_to_the_block_that_runs_them() -> None:
    """Each block's MLP all-reduces once in forward (RowwiseParallel's output) and once in
    backward (ColwiseParallel's input gradient), each step."""
    u = _run("fsdp-tp").units
    for rank in range(4):
        mine = u[(u["rank"] == rank) & u["phase"].astype(object).isin(["tp_fwd", "tp_bwd"])]
        got = {(r.unit, r.phase): int(r.num_ops) for r in mine.itertuples()}
        assert got == {(b, p): 2 for b in BLOCKS for p in ("tp_fwd", "tp_bwd")}


def test_hsdp_replicate_all_reduce_is_its_own_phase() -> None:
    """Per step and unit one reduce-scatter (shard group) and one replicate all-reduce; the
    replicate time is no longer counted as ``rs``, and each matches the hand computation."""
    u = _run("hsdp").units
    for rank in range(4):
        mine = u[u["rank"] == rank]
        for phase, kind in (("rs", "reduce_scatter"), ("ar_rep", "all_reduce")):
            rows = mine[mine["phase"].astype(object) == phase]
            assert set(rows["unit"]) == {*BLOCKS, "root"}
            assert set(rows["kind"]) == {kind} and (rows["num_ops"] == 2).all()
    for phase in ("rs", "ar_rep"):
        assert _exposed("hsdp", 0, [phase]) == pytest.approx(
            _exposed_by_hand("hsdp", 0, [phase]), abs=0.5
        )


def test_new_phases_have_their_own_lane_and_colour() -> None:
    assert Phase.AR_REP.row is Row.REPLICA and Phase.TP_FWD.row is Row.TP
    colours = {p.colour for p in Phase}
    assert len(colours) == len(Phase)


def test_tp_waits_are_the_blocks_tp_waits() -> None:
    """Each block waits on its forward and its backward TP all-reduce once a step."""
    ev = _load("fsdp-tp").events
    waits = ev[(ev["name"] == "_c10d_functional::wait_tensor") & (ev["rank"] == 2)]
    got = Counter(zip(waits["unit"].astype(object), waits["phase"].astype(object), strict=True))
    assert got == Counter({(b, p): 2 for b in BLOCKS for p in ("tp_fwd.wait", "tp_bwd.wait")})
