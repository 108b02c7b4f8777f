"""torchrun's static rendezvous across lab namespaces, exactly as the ``run`` launcher uses it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from overlapscope.lab import RankSlot, shaped_network
from tests.lab.support import assert_torn_down, needs_lab, root_state

pytestmark = [pytest.mark.root, pytest.mark.multirank, needs_lab]

WORKER = """
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.full((4,), float(rank + 1))
dist.all_reduce(t)
print(f"rank={rank} world={dist.get_world_size()} sum={t[0].item():g} "
      f"ifname={os.environ['GLOO_SOCKET_IFNAME']}", flush=True)
dist.destroy_process_group()
"""


def test_torchrun_static_rendezvous_all_reduce(tmp_path: Path) -> None:
    num_ranks = 2
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    lines: list[str] = []
    before = root_state()
    with shaped_network(num_ranks, 0.5) as lab:

        def argv(slot: RankSlot) -> list[str]:
            return [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                str(num_ranks),
                "--node-rank",
                str(slot.rank),
                "--nproc-per-node",
                "1",
                "--master-addr",
                lab.master_addr,
                "--master-port",
                str(lab.master_port),
                str(worker),
            ]

        codes = lab.run_ranks(
            argv,
            {"OMP_NUM_THREADS": "1"},
            tmp_path / "logs",
            timeout_s=90,
            on_rank0_line=lines.append,
        )
    assert codes == [0] * num_ranks, [
        (tmp_path / "logs" / f"rank-{k}.log").read_text() for k in range(num_ranks)
    ]
    expected_sum = num_ranks * (num_ranks + 1) // 2
    assert f"rank=0 world={num_ranks} sum={expected_sum:g} ifname=lab0\n" in lines
    rank1 = (tmp_path / "logs" / "rank-1.log").read_text()
    assert f"rank=1 world={num_ranks} sum={expected_sum:g}" in rank1
    assert os.path.exists(tmp_path / "logs" / "rank-0.log")
    assert_torn_down(before, lab.namespaces)
