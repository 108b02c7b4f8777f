"""The frames' rules (overlapscope/flight/frames.py) on the stacks of real dumps, and on the
engine's stacks as its code issues them (its gloo runs record none: the engine's units talk
over its own lane)."""

from __future__ import annotations

from pathlib import Path

import pytest

from overlapscope.flight.frames import classify, stack_text
from overlapscope.phases import Phase
from tests.flight.helpers import load_entries

ENGINE = "/x/overlapscope/engine/"
TORCH = "/x/torch/distributed/distributed_c10d.py"


@pytest.mark.parametrize(
    ("names", "files", "expected"),
    [
        (["all_gather_single", "all_gather", "_issue_all_gather", "_execute", "hook", "_call_impl"],
         [TORCH, ENGINE + "comm.py", ENGINE + "sharded.py", ENGINE + "sharded.py",
          ENGINE + "sharded.py", "/x/torch/nn/modules/module.py"], ("engine", Phase.AG_FWD)),
        (["all_gather_single", "all_gather", "_issue_all_gather", "_execute", "_pre_backward",
          "hook", "_engine_run_backward"],
         [TORCH, *[ENGINE + "sharded.py"] * 5, "/x/torch/autograd/graph.py"],
         ("engine", Phase.AG_BWD)),
        (["reduce_scatter_single", "reduce_scatter_mean", "_reduce", "hook"],
         [TORCH, ENGINE + "comm.py", ENGINE + "sharded.py", ENGINE + "sharded.py"],
         ("engine", Phase.RS)),
        (["all_gather_single", "all_gather", "full_state_dict"],
         [TORCH, ENGINE + "comm.py", ENGINE + "sharded.py"], ("engine", None)),
        (["all_reduce", "wrapper", "train"], [TORCH, TORCH, "/x/train.py"], (None, None)),
    ],
    ids=["engine-ag-fwd", "engine-ag-bwd", "engine-rs", "engine-state-dict", "plain"],
)  # fmt: skip
def test_engine_and_plain_stacks(
    names: list[str], files: list[str], expected: tuple[str | None, Phase | None]
) -> None:
    assert classify(names, files) == expected


def test_fsdp1_stacks_of_a_real_run(fsdp1_four: Path) -> None:
    seen = set()
    for e in load_entries(fsdp1_four)[2]:
        names = [f["name"] for f in e["frames"]]
        seen.add(classify(names, [f["filename"] for f in e["frames"]]))
    assert seen == {
        ("fsdp1", Phase.AG_FWD),
        ("fsdp1", Phase.AG_BWD),
        ("fsdp1", Phase.RS),
        (None, None),
    }  # fmt: skip  (the run's last barrier)


def test_stack_text_keeps_the_call_fsdp_and_the_caller(fsdp2_profiled: Path) -> None:
    e = load_entries(fsdp2_profiled)[0][0]
    text = stack_text(e["frames"])
    assert text.startswith("all_gather_single (distributed/distributed_c10d.py:")
    assert "foreach_all_gather" in text and "_step (flight/gloo_run.py:" in text
