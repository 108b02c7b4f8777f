"""NCCL's per-communicator streams as process groups where ``record_param_comms`` names none
(issue 44 point 1, the streams' rung; trace/groups/assign.py, trace/groups/streams.py).

A hand-built HSDP-like NCCL job of 4 ranks on a (replicate 2, shard 2) mesh: shard groups
{0, 1} and {2, 3}, replicate groups {0, 2} and {1, 3}. Each rank runs its shard group's
all-gathers and reduce-scatter on one stream (made first: id 20) and its replicate group's
all-reduce on another (id 24); ``record_param_comms`` carries sizes and ``Group size`` but
no ``Process Group Name`` / ``Desc`` / ``Ranks``, as older or stripped traces do.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from overlapscope.analysis import analyze
from overlapscope.trace.groups.assign import nccl_labels, parse_label
from overlapscope.trace.groups.streams import signature
from overlapscope.trace.read.header import PgEntry
from overlapscope.trace.run.loader import load_run
from tests.trace.kineto import kernel, launch, step, trace, write, x

SHARD_STREAM, REPLICATE_STREAM = 20, 24
NUM_STEPS = 3
_ARGS = "(ncclDevKernelArgsStorage<4096ul>)"
_KERNELS = {
    "allgather": f"ncclDevKernel_AllGather_RING_LL{_ARGS}",
    "reduce_scatter": f"ncclDevKernel_ReduceScatter_Sum_f32_RING_LL{_ARGS}",
    "allreduce": f"ncclDevKernel_AllReduce_Sum_f32_RING_LL{_ARGS}",
}
_SEND_RECV = f"ncclDevKernel_SendRecv{_ARGS}"
# per step: (collective, elements in, elements out, stream)
_STEP = [
    ("allgather", 500, 1000, SHARD_STREAM),
    ("allgather", 500, 1000, SHARD_STREAM),
    ("reduce_scatter", 1000, 500, SHARD_STREAM),
    ("allreduce", 500, 500, REPLICATE_STREAM),
]


def _shard(rank: int) -> list[int]:
    return [0, 1] if rank < 2 else [2, 3]


def _replicate(rank: int) -> list[int]:
    return [0, 2] if rank % 2 == 0 else [1, 3]


def _pg_config(rank: int) -> list[dict[str, Any]]:
    return [
        {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 4, "ranks": [0, 1, 2, 3]},
        {"pg_name": "1", "pg_desc": "mesh_shard", "pg_size": 2, "ranks": _shard(rank)},
        {"pg_name": "2", "pg_desc": "mesh_replicate", "pg_size": 2, "ranks": _replicate(rank)},
    ]


def _events(rank: int, streams: tuple[int, int], p2p: bool = False) -> list[dict[str, Any]]:
    """Rank ``rank``'s steps; ``streams``: its shard and replicate streams. Ranks 2 and 3
    run their shard collectives 400 µs later (their own group waits, not 0 and 1).
    ``p2p``: and a point-to-point transfer per step on a third stream."""
    events: list[dict[str, Any]] = []
    for s in range(NUM_STEPS):
        t0 = 10_000.0 * s
        events.append(step(s, t0, 9_000.0))
        for k, (coll, n_in, n_out, stream) in enumerate(_STEP):
            t = t0 + 100.0 + 2_000.0 * k
            corr = 100 * s + k + 1
            args = {"In msg nelems": n_in, "Out msg nelems": n_out, "dtype": "Float",
                    "Group size": 2, "Collective name": coll, "Seq": s}  # fmt: skip
            events.append(x("record_param_comms", t, 50.0, cat="cpu_op", args=args))
            events.append(launch(t + 10.0, corr))
            late = 400.0 if rank >= 2 and stream == SHARD_STREAM else 0.0
            own = streams[0] if stream == SHARD_STREAM else streams[1]
            events.append(kernel(_KERNELS[coll], t + 200.0, 1_000.0 + late, corr, stream=own))
        if p2p:  # a pipeline stage's transfer, on a communicator of its own
            events.append(launch(t0 + 8_900.0, 100 * s + 99))
            events.append(kernel(_SEND_RECV, t0 + 8_910.0, 50.0, 100 * s + 99, stream=28))
    return events


def _job(tmp: Path, pg_config: bool, p2p: bool = False) -> None:
    for r in range(4):
        doc = trace(r, 4, _events(r, (SHARD_STREAM, REPLICATE_STREAM), p2p), backend="nccl")
        if pg_config:
            doc["distributedInfo"]["pg_config"] = _pg_config(r)
        write(tmp / f"rank-{r}.json", doc)


def _groups_of_ranks(tmp: Path) -> dict[int, set[str]]:
    ev = load_run(tmp).events
    comm = ev[ev["lane"] == "comm"]
    return {int(r): set(g["group"].astype(str)) for r, g in comm.groupby("rank")}


@pytest.mark.parametrize("p2p", [False, True], ids=["collectives", "and-point-to-point"])
def test_streams_are_given_the_groups_of_pg_config(tmp_path: Path, p2p: bool) -> None:
    """A point-to-point stream is not one of them: its transfers keep ``nccl``."""
    _job(tmp_path, pg_config=True, p2p=p2p)
    assert _groups_of_ranks(tmp_path) == {
        r: {f"mesh_shard[{','.join(map(str, _shard(r)))}]",
            f"mesh_replicate[{','.join(map(str, _replicate(r)))}]"} | ({"nccl"} if p2p else set())
        for r in range(4)
    }  # fmt: skip
    assert not [w for w in load_run(tmp_path).warnings if "NCCL" in w or "no process" in w]


def test_collectives_are_matched_among_the_streams_group(tmp_path: Path) -> None:
    """Each collective of 2 ranks, its group's; per group and step, the step's collectives
    of that stream; the late shard group {2, 3} names its own straggler."""
    _job(tmp_path, pg_config=True)
    a = analyze(load_run(tmp_path))
    coll = a.collectives
    assert set(coll["num_ranks"]) == {2}
    assert Counter(str(g) for g in coll["group"]) == Counter({
        "mesh_shard[0,1]": 3 * NUM_STEPS, "mesh_shard[2,3]": 3 * NUM_STEPS,
        "mesh_replicate[0,2]": NUM_STEPS, "mesh_replicate[1,3]": NUM_STEPS,
    })  # fmt: skip
    for g, rows in a.collective_ranks.groupby("group", observed=True):
        assert set(rows["rank"].astype(int)) == set(parse_label(g)[1])  # type: ignore[index]
    shard = coll[coll["group"].astype(str).str.startswith("mesh_shard")]
    assert Counter(zip(shard["kind"], shard["bytes"], strict=True)) == Counter({
        ("all_gather", 4000.0): 4 * NUM_STEPS, ("reduce_scatter", 4000.0): 2 * NUM_STEPS,
    })  # fmt: skip
    for g, rows in coll.groupby("group", observed=True):
        named = set(rows["straggler_rank"].dropna().astype(int)) - {-1}
        assert named <= set(parse_label(g)[1])  # type: ignore[index]


def test_without_pg_config_each_stream_is_a_group_by_what_it_runs(tmp_path: Path) -> None:
    """The ranks' streams have other ids (rank 3 made a stream before NCCL's): the same
    collectives still name one group; which ranks share it is not known, and said, counted."""
    for r in range(4):
        streams = (30, 34) if r == 3 else (20, 24)
        write(tmp_path / f"rank-{r}.json", trace(r, 4, _events(r, streams), backend="nccl"))
    run = load_run(tmp_path)
    per_rank = _groups_of_ranks(tmp_path)
    assert len({frozenset(g) for g in per_rank.values()}) == 1
    names = sorted(per_rank[0])
    assert [n.split("#")[0] for n in names] == ["nccl:all_gather+reduce_scatter", "nccl:all_reduce"]
    said = [w for w in run.warnings if "NCCL collectives on 2 streams" in w]
    assert len(said) == 4 and all(f"{4 * NUM_STEPS} NCCL collectives" in w for w in said)
    assert all("which ranks share each group is not known" in w for w in said)
    coll = analyze(run).collectives
    assert set(coll["num_ranks"]) == {4}
    assert Counter(str(g) for g in coll["group"]) == Counter({
        names[0]: 3 * NUM_STEPS, names[1]: NUM_STEPS
    })  # fmt: skip


def test_one_nccl_stream_and_nothing_else_is_one_group_of_the_job_said_so(tmp_path: Path) -> None:
    for r in range(4):
        write(tmp_path / f"rank-{r}.json", trace(r, 4, _events(r, (20, 20)), backend="nccl"))
    run = load_run(tmp_path)
    said = [w for w in run.warnings if "no process groups in the trace" in w]
    assert len(said) == 4
    assert all(f"every collective ({4 * NUM_STEPS} on this rank)" in w for w in said)
    comm = run.events[run.events["lane"] == "comm"]
    assert set(comm["group"].astype(str)) == {"nccl"}


@pytest.mark.parametrize(
    ("streams", "groups", "want"),
    [
        # more groups than streams: the default group (no collectives of its own) is left
        ([20, 24], ("0", "1", "2"), {20: "mesh_shard[0,1]", 24: "mesh_replicate[0,2]"}),
        # groups of the whole job only: their name stays
        ([20, 24], ("0",), {}),
    ],
)
def test_nccl_labels_from_pg_config(
    streams: list[int], groups: tuple[str, ...], want: dict[int, str]
) -> None:
    every = {
        "0": PgEntry("0", "default_pg", (0, 1, 2, 3)),
        "1": PgEntry("1", "mesh_shard", (0, 1)),
        "2": PgEntry("2", "mesh_replicate", (0, 2)),
    }
    stream = np.asarray(streams * 2)
    ran = (
        np.asarray(["all_gather", "all_reduce"] * 2, dtype=object),
        np.asarray([4000, 2000] * 2),
        np.asarray([0, 0, 1, 1]),
        np.asarray([2, 2, -1, -1]),
    )
    labels, warning = nccl_labels(stream, ran, [every[g] for g in groups], 0, 4)
    assert labels == want and warning is None


def test_signature_is_what_a_stream_runs_an_all_to_alls_size_left_out() -> None:
    """An expert-parallel all-to-all moves other sizes on other ranks: its kind is enough."""
    steps = np.asarray([0, 0, 1])

    def named(kinds: list[str], nbytes: list[int]) -> str:
        return signature(np.asarray(kinds, dtype=object), np.asarray(nbytes), steps)

    a2a = named(["all_to_all", "all_reduce", "all_to_all"], [300, 64, 999])
    assert a2a.startswith("nccl:all_to_all+all_reduce#")
    assert named(["all_to_all", "all_reduce", "all_to_all"], [512, 64, 7]) == a2a
    assert named(["all_to_all", "all_reduce", "all_to_all"], [300, 32, 999]) != a2a
    assert named(["all_gather", "all_reduce", "x"], [1, 2, 3]) != named(
        ["all_gather", "all_reduce", "x"], [9, 2, 3]
    )
