"""The critical path's graph grows as ranks × collectives, not ranks² × collectives: a sync
node waits on the latest arrival of the other ranks, so each collective keeps its arrivals
once (graph.arr_idx) instead of one edge per (waiting rank, arriving rank) pair. Checked on
the steps of 64 ranks made from a shipped 2-rank run (its event table copied 32 times, each
copy's ranks renumbered and its clock shifted by a few µs, as cluster.synth.rerank_copies
does to the files, without parsing 64 files), where the pairs would be 63 per arrival; the
batched what-ifs there equal one-by-one replays (ties everywhere: the copies' durations are
the same)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from overlapscope.cluster.synth import SHIFT_NS_PER_RANK
from overlapscope.trace.run.loader import load_run
from tests.clocks.test_whatif_batch import check, step_graphs
from tests.conftest import REPO

NUM_RANKS = 64


@pytest.fixture(scope="module")
def graphs() -> list:
    events = load_run(REPO / "traces" / "backward_pre").events
    events = events[events["step"] >= 0]
    num_src = int(events["rank"].max()) + 1
    copies = []
    for k in range(NUM_RANKS // num_src):
        shift_us = k * num_src * SHIFT_NS_PER_RANK / 1e3
        copies.append(
            events.assign(
                rank=events["rank"] + k * num_src,
                ts_us=events["ts_us"] + shift_us,
                end_us=events["end_us"] + shift_us,
            )
        )
    return step_graphs(pd.concat(copies, ignore_index=True))


def test_arrivals_are_linear_in_ranks_per_collective(graphs: list) -> None:
    assert len(graphs) == 2
    for graph in graphs:
        transfers = graph.key[graph.key >= 0]
        num_collectives = len(np.unique(transfers))
        assert num_collectives >= 10
        assert len(np.unique(graph.rank)) == NUM_RANKS
        # one arrival per rank and collective (pairs would be NUM_RANKS - 1 times as many)
        assert 0 < len(graph.arr_idx) <= 2 * NUM_RANKS * num_collectives
        # every sync node reads a range of its own collective's arrivals
        sync = np.flatnonzero(graph.arr_hi > graph.arr_lo)
        assert len(sync) >= NUM_RANKS * num_collectives // 2
        assert (graph.arr_hi[sync] - graph.arr_lo[sync] <= 2 * NUM_RANKS).all()


def test_batched_whatifs_equal_one_by_one_at_64_ranks(graphs: list) -> None:
    for seed, graph in enumerate(graphs):
        check(graph, seed)
