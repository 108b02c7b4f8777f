"""The what-ifs of the critical path are replayed together (graph.replay_ends, one matrix of
weights); each column must give exactly the step end that a replay of that column alone
gives (graph.replay: every node's end, then the latest), on real runs and on steps without
any collective."""

from __future__ import annotations

import numpy as np
import pytest

from overlapscope.analysis.critical_path import path as critical_path
from overlapscope.analysis.critical_path.graph import Events, StepGraph, replay, replay_ends
from overlapscope.analysis.critical_path.path import _windows
from overlapscope.trace.run.loader import load_run
from tests.clocks.conftest import table
from tests.conftest import REPO


def step_graphs(events: object) -> list[StepGraph]:
    rows = Events.of(events, np.arange(len(events)))  # type: ignore[arg-type]
    rank, start, end, step = _windows(rows)
    return [graph for _, graph in critical_path.step_graphs(rows, (rank, start, end), step)]


def check(graph: StepGraph, seed: int) -> None:
    rng = np.random.default_rng(seed)
    # the recorded weights, each link 10% shorter, and random non-negative re-weightings
    num = len(graph.weight)
    shorter = np.repeat(graph.weight[:, None], min(num, 6), axis=1)
    shorter[np.arange(shorter.shape[1]), np.arange(shorter.shape[1])] *= 0.9
    noisy = graph.weight[:, None] * rng.uniform(0.5, 1.5, (num, 3))
    weights = np.hstack([graph.weight[:, None], shorter, noisy])
    together = replay_ends(graph, weights)
    alone = [float(replay(graph, weights[:, c].copy())[0].max()) for c in range(weights.shape[1])]
    assert together.tolist() == alone


@pytest.mark.parametrize("name", ["backward_pre", "none"])
def test_batched_whatifs_equal_one_by_one_on_sample_runs(name: str) -> None:
    events = load_run(REPO / "traces" / name).events
    graphs = step_graphs(events[events["step"] >= 0].reset_index(drop=True))
    assert len(graphs) == 2 and all(len(g.arr_idx) for g in graphs)
    for seed, graph in enumerate(graphs):
        check(graph, seed)


def test_batched_whatifs_without_any_collective() -> None:
    rows = [
        {"rank": 0, "lane": "step", "ts": 0, "dur": 300},
        {"rank": 0, "lane": "compute", "ts": 0, "dur": 200, "unit": "A", "phase": "fwd"},
        {"rank": 1, "lane": "step", "ts": 10, "dur": 250},
        {"rank": 1, "lane": "compute", "ts": 10, "dur": 250, "unit": "A", "phase": "fwd"},
    ]
    (graph,) = step_graphs(table(rows))
    assert len(graph.arr_idx) == 0
    check(graph, 0)
