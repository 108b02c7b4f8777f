"""Process groups, matching within them, kinds and sizes from the issuing op, and clocks
through groups (issue 44 points 1-3), on the real CPU/gloo fixtures ``traces/parallel-*``
(``scripts/parallel_capture.py``) and on hand-built traces.

The figures are counted by hand from the model (``traces/parallel-hsdp/README.md``): a
block has 37,376 parameters (norm 128, attn 4,160, up 16,640, down 16,448), the head 4,160;
fp32. Per step FSDP all-gathers 5 units in forward and the 4 blocks again in backward (the
root is not resharded after forward), and reduce-scatters 5.
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from overlapscope.analysis import analyze
from overlapscope.analysis.api import RunAnalysis
from overlapscope.trace.groups.assign import parse_label, thread_clusters
from overlapscope.trace.run.loader import load_run
from tests.trace.kineto import GLOO_TID, gloo, kernel, launch, step, thread_name, trace, write, x

REPO = Path(__file__).resolve().parents[2]
BLOCK, HEAD = 37_376, 4_160  # parameters
TP_BLOCK = 128 + 4_160 + 16_640 // 2 + 256 * 64 // 2 + 64  # the MLP halved by TP: 20,864


@cache
def _run(layout: str) -> RunAnalysis:
    return analyze(load_run(REPO / "traces" / f"parallel-{layout}"))


@cache
def _comm(layout: str) -> Any:
    ev = load_run(REPO / "traces" / f"parallel-{layout}").events
    return ev[(ev["lane"] == "comm") & (ev["step"] >= 0)]


def _per_rank_groups(layout: str) -> dict[int, set[str]]:
    c = _comm(layout)
    return {int(r): set(g["group"].astype(str)) for r, g in c.groupby("rank")}


def test_hsdp_groups_are_the_mesh_groups_of_each_rank() -> None:
    assert _per_rank_groups("hsdp") == {
        0: {"mesh_shard[0,1]", "mesh_replicate[0,2]"},
        1: {"mesh_shard[0,1]", "mesh_replicate[1,3]"},
        2: {"mesh_shard[2,3]", "mesh_replicate[0,2]"},
        3: {"mesh_shard[2,3]", "mesh_replicate[1,3]"},
    }


@pytest.mark.parametrize("layout", ["fsdp-tp", "fsdp-tp-sp"])
def test_fsdp_tp_groups_are_dp_and_tp(layout: str) -> None:
    assert _per_rank_groups(layout) == {
        0: {"mesh_dp[0,2]", "mesh_tp[0,1]"},
        1: {"mesh_dp[1,3]", "mesh_tp[0,1]"},
        2: {"mesh_dp[0,2]", "mesh_tp[2,3]"},
        3: {"mesh_dp[1,3]", "mesh_tp[2,3]"},
    }


def test_plain_fsdp2_keeps_one_group_of_the_whole_job() -> None:
    """Its groups (default_pg and mesh_shard) both span ranks 0-1: the name stays."""
    assert _per_rank_groups("fsdp2") == {0: {"gloo"}, 1: {"gloo"}}


def _kinds(layout: str, rank: int) -> Counter[tuple[str, str, int]]:
    c = _comm(layout)
    mine = c[c["rank"] == rank]
    return Counter(
        (str(g).split("[")[0], str(k), int(b))
        for g, k, b in zip(mine["group"], mine["kind"], mine["bytes"], strict=True)
    )


def test_hsdp_kinds_and_sizes_from_the_issuing_op() -> None:
    """Two steps: per step 9 all-gathers and 5 reduce-scatters on the shard group (the
    gathered unit, n = 2), 5 all-reduces of the shard's gradient on the replicate group."""
    assert _kinds("hsdp", 0) == Counter({
        ("mesh_shard", "all_gather", BLOCK * 4): 2 * 8,
        ("mesh_shard", "all_gather", HEAD * 4): 2 * 1,
        ("mesh_shard", "reduce_scatter", BLOCK * 4): 2 * 4,
        ("mesh_shard", "reduce_scatter", HEAD * 4): 2 * 1,
        ("mesh_replicate", "all_reduce", BLOCK * 4 // 2): 2 * 4,
        ("mesh_replicate", "all_reduce", HEAD * 4 // 2): 2 * 1,
    })  # fmt: skip


def test_plain_fsdp2_reduce_scatters_are_reduce_scatters() -> None:
    """gloo runs them as gloo:all_reduce; c10d::_reduce_scatter_base_ issued them."""
    assert _kinds("fsdp2", 1) == Counter({
        ("gloo", "all_gather", BLOCK * 4): 2 * 8,
        ("gloo", "all_gather", HEAD * 4): 2 * 1,
        ("gloo", "reduce_scatter", BLOCK * 4): 2 * 4,
        ("gloo", "reduce_scatter", HEAD * 4): 2 * 1,
    })  # fmt: skip


def test_fsdp_tp_kinds_and_sizes() -> None:
    """FSDP over dp gathers the TP-sharded block; TP all-reduces one activation
    (batch 2 x seq 16 x dim 64) in each block's forward and backward."""
    assert _kinds("fsdp-tp", 3) == Counter({
        ("mesh_dp", "all_gather", TP_BLOCK * 4): 2 * 8,
        ("mesh_dp", "all_gather", HEAD * 4): 2 * 1,
        ("mesh_dp", "reduce_scatter", TP_BLOCK * 4): 2 * 4,
        ("mesh_dp", "reduce_scatter", HEAD * 4): 2 * 1,
        ("mesh_tp", "all_reduce", 2 * 16 * 64 * 4): 2 * 8,
    })  # fmt: skip


def test_sequence_parallel_kinds_and_sizes() -> None:
    """With sequence parallel, TP all-gathers and reduce-scatters the activation (the
    gathered one: 4 x 16 x 64 as the coalesced op records it) around each MLP, and
    all-reduces the norm's weight and bias gradients (64 each)."""
    tp = Counter({k: v for k, v in _kinds("fsdp-tp-sp", 0).items() if k[0] == "mesh_tp"})
    assert tp == Counter({
        ("mesh_tp", "all_gather", 4 * 16 * 64 * 4): 2 * 8,
        ("mesh_tp", "reduce_scatter", 4 * 16 * 64 * 4): 2 * 8,
        ("mesh_tp", "all_reduce", 64 * 4): 2 * 8,
    })  # fmt: skip


@pytest.mark.parametrize("layout", ["hsdp", "fsdp-tp", "fsdp-tp-sp"])
def test_collectives_are_matched_among_the_groups_members(layout: str) -> None:
    coll = _run(layout).collectives
    assert len(coll) > 0
    assert (coll["num_ranks"] == 2).all()
    ranks = _run(layout).collective_ranks
    for g, rows in ranks.groupby("group"):
        parsed = parse_label(g)
        assert parsed is not None
        assert set(rows["rank"].astype(int)) == set(parsed[1])
    # each collective of a group on each of its ranks, once
    want = {"hsdp": 14 + 5, "fsdp-tp": 14 + 8, "fsdp-tp-sp": 14 + 24}[layout]
    per_rank = ranks.groupby(["rank", "step"]).size()
    assert (per_rank == want).all()


@pytest.mark.parametrize("layout", ["fsdp2", "hsdp", "fsdp-tp", "fsdp-tp-sp"])
def test_each_matched_collective_is_one_collective(layout: str) -> None:
    """Its ranks ran one kind, of one size, for one unit (seq follows the issue order)."""
    c = _comm(layout)
    c = c[c["seq"] >= 0]
    g = c.groupby(["group", "step", "seq"], observed=True)
    assert (g["kind"].nunique() == 1).all() and (g["bytes"].nunique() == 1).all()
    assert (g["unit"].nunique(dropna=False) == 1).all() and (g["rank"].nunique() == 2).all()


def test_straggler_and_peer_wait_are_per_group() -> None:
    """A replicate all-reduce of ranks {0, 2} names 0 or 2 as its straggler, never 1."""
    coll = _run("hsdp").collectives
    for g, rows in coll.groupby("group"):
        members = set(parse_label(g)[1])  # type: ignore[index]
        named = set(rows["straggler_rank"].dropna().astype(int)) - {-1}
        assert named <= members


@pytest.mark.parametrize("layout", ["fsdp2", "hsdp", "fsdp-tp", "fsdp-tp-sp"])
def test_clocks_on_one_host_contain_zero_for_every_rank(layout: str) -> None:
    """Ranks 0 and 3 of a 2 x 2 mesh share no group: rank 3 is placed through the others.
    No warning of a clock not aligned, or of causality contradicted."""
    a = _run(layout)
    clocks = a.clocks
    assert len(clocks) == {"fsdp2": 2}.get(layout, 4)
    assert (clocks["lo_us"] <= 0).all() and (clocks["hi_us"] >= 0).all()
    assert clocks.loc[clocks["rank"] != clocks["reference_rank"], "aligned"].all()
    text = " ".join(a.warnings)
    assert "clock not aligned" not in text and "contradict causality" not in text


def test_threads_of_one_group_are_one_cluster_even_apart() -> None:
    """HSDP rank 1's replicate threads have ids 7161 and 7165: they ran the same work."""
    tids = np.asarray([7161, 7165, 7180, 7181, 7161, 7180])
    sizes = np.asarray([-1, -1, 2, 2, -1, -1])
    work = np.asarray(["ar:9", "ar:9", "ag:5", "ag:5", "ar:4", "rs:7"], dtype=object)
    assert thread_clusters(tids, sizes, work) == [[7161, 7165], [7180, 7181]]


# -- a hand-built NCCL-style job: record_param_comms names each group -----------------------

AR_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _nccl_rank(tmp: Path, rank: int) -> Path:
    """Rank ``rank`` of 4: per step an all-reduce of 1,000 floats on its replicate group
    ({0, 2} or {1, 3}) and one of 10 floats on the world group, 5 steps."""
    events: list[dict[str, Any]] = []
    replicate = [0, 2] if rank % 2 == 0 else [1, 3]
    for s in range(5):
        t0 = 10_000.0 * s
        events.append(step(s, t0, 9_000.0))
        for k, (name, desc, ranks, n) in enumerate([
            ("1" if rank % 2 == 0 else "2", "mesh_replicate", replicate, 1000),
            ("0", "default_pg", [0, 1, 2, 3], 10),
        ]):  # fmt: skip
            t = t0 + 100.0 + 3_000.0 * k
            corr = 100 * s + k + 1
            args = {"Process Group Name": name, "Process Group Desc": desc,
                    "Process Group Ranks": str(ranks), "In msg nelems": n,
                    "Out msg nelems": n, "dtype": "Float", "Group size": len(ranks),
                    "Collective name": "allreduce", "Seq": s}  # fmt: skip
            events.append(x("record_param_comms", t, 50.0, cat="cpu_op", args=args))
            events.append(launch(t + 10.0, corr))
            end = t + 2_000.0 + (300.0 if rank in (2, 3) and k == 0 else 0.0)
            events.append(kernel(AR_KERNEL, t + 200.0, end - t - 200.0, corr, stream=20 + k))
    return write(tmp / f"rank-{rank}.json", trace(rank, 4, events, backend="nccl"))


def test_record_param_comms_names_the_groups(tmp_path: Path) -> None:
    for r in range(4):
        _nccl_rank(tmp_path, r)
    a = analyze(load_run(tmp_path))
    coll = a.collectives
    groups = Counter(str(g) for g in coll["group"])
    # 5 steps: one collective per step in each replicate group, one in the world group
    assert groups == Counter({"mesh_replicate[0,2]": 5, "mesh_replicate[1,3]": 5, "0": 5})
    assert set(coll.loc[coll["group"] == "0", "num_ranks"]) == {4}
    rep = coll[coll["group"] != "0"]
    assert set(rep["num_ranks"]) == {2}
    assert set(rep["bytes"]) == {4000.0}
    # busbw of an all-reduce: 2 (n - 1) / n of algbw, n the group's 2 ranks
    assert np.allclose(rep["busbw_gbps"] / rep["algbw_gbps"], 1.0)


# -- nothing known: one group of the whole job, said so --------------------------------------


def _gloo_rank(tmp: Path, rank: int, pg_config: list[dict[str, Any]] | None) -> Path:
    events = [thread_name(GLOO_TID, "pt_gloo_runloop"), step(1, 0.0, 1000.0)]
    events += [x("c10d::allreduce_", 10.0, 5.0, cat="cpu_op",
                 args={"Input Dims": [[[256]]], "Input type": ["TensorList"]}),
               gloo("all_reduce", 20.0, 100.0, 256)]  # fmt: skip
    doc = trace(rank, 2, events)
    if pg_config is not None:
        doc["distributedInfo"]["pg_config"] = pg_config
    return write(tmp / f"rank-{rank}.json", doc)


@pytest.mark.parametrize(
    ("pg_config", "warned"),
    [
        (None, True),
        ([{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}], False),
    ],
)
def test_one_group_of_the_whole_job_only_when_nothing_else_is_known(
    tmp_path: Path, pg_config: list[dict[str, Any]] | None, warned: bool
) -> None:
    for r in range(2):
        _gloo_rank(tmp_path, r, pg_config)
    run = load_run(tmp_path)
    said = [w for w in run.warnings if "no process groups in the trace" in w]
    assert bool(said) is warned
    comm = run.events[run.events["lane"] == "comm"]
    assert set(comm["group"].astype(str)) == {"gloo"} and len(comm) == 2
