"""Contract: the engine issues its collectives in the order the simulator replays them.

Both run the one schedule (overlapscope/engine/schedule.py); this checks that the engine's
hooks fire where the simulator assumes and execute every action in order. Two real gloo
ranks train a tiny GPT under each configuration; the second step (the first one knows no
forward order, so it prefetches nothing) is profiled, and its issue ranges
(``ovs/ag_fwd|ag_bwd|rs/<unit>``), in time order, must equal the simulated program's
collectives.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from overlapscope.config import EngineConfig, Policy
from overlapscope.engine.workloads import ModelConfig, build_model, global_batch, local_rows
from overlapscope.phases import COMM_PHASES
from overlapscope.sim.schedule import Scenario, StepModel, build_program
from overlapscope.trace.naming.ranges import parse_range
from tests.conftest import spawn

pytestmark = pytest.mark.multirank

MODEL = ModelConfig(kind="gpt", layers=3, dim=16, heads=2, seq_len=8, vocab=32)
CONFIGS = {
    "none": Scenario(Policy.NONE),
    "backward_post": Scenario(Policy.BACKWARD_POST),
    "backward_pre": Scenario(Policy.BACKWARD_PRE),
    "backward_pre+limit=1": Scenario(Policy.BACKWARD_PRE, limit_all_gathers=1),
    "backward_post+fwd": Scenario(Policy.BACKWARD_POST, forward_prefetch=True),
    "backward_pre+fwd+limit=2": Scenario(
        Policy.BACKWARD_PRE, forward_prefetch=True, limit_all_gathers=2
    ),
}


def _issue_order(rank: int, world: int, out: Path) -> None:
    from overlapscope.engine.sharded import ShardedModel

    orders: dict[str, list[list[str]]] = {}
    for label, s in CONFIGS.items():
        model, units = build_model(MODEL, seed=0)
        cfg = EngineConfig(
            policy=s.policy,
            forward_prefetch=s.forward_prefetch,
            limit_all_gathers=s.limit_all_gathers,
        )
        sharded = ShardedModel(model, units, cfg)
        opt = torch.optim.SGD(sharded.parameters(), lr=0.01)
        for step in range(2):
            x, y = global_batch(MODEL, 4, step, seed=0)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                sharded(local_rows(x, rank, world), local_rows(y, rank, world)).backward()
                sharded.optimizer_step(opt)
            opt.zero_grad()
        sharded.close()
        ranges = sorted(
            (e.time_range.start, r.phase.value, r.unit)
            for e in prof.events()
            if (r := parse_range(e.name)) is not None and r.phase in COMM_PHASES
        )
        orders[label] = [[phase, unit] for _, phase, unit in ranges]
        if label == "none":
            orders["units"] = [[u] for u in units]
    (out / f"rank-{rank}.json").write_text(json.dumps(orders))


@pytest.fixture(scope="module")
def engine_orders(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, list[list[str]]]]:
    out = tmp_path_factory.mktemp("contract")
    spawn(_issue_order, 2, out)
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize("label", list(CONFIGS))
def test_engine_issues_in_the_simulated_order(
    engine_orders: list[dict[str, list[list[str]]]], label: str
) -> None:
    units = tuple(u for (u,) in engine_orders[0]["units"])
    sizes = {u: 1 for u in ("root", *units)}
    program = build_program(StepModel(units, sizes, sizes), CONFIGS[label])
    simulated = [[c.phase.value, c.unit] for c in program.collectives]
    assert any(p == "ag_bwd" for p, _ in simulated)  # the schedule has something to order
    for rank, orders in enumerate(engine_orders):
        assert orders[label] == simulated, f"rank {rank}"
