"""Findings whose right answer is known before the tool runs: hand-built GPU runs (each rank
a compute and an NCCL stream, every op with its CPU launch; tests/analysis/gpu_runs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from overlapscope.analysis import analyze
from overlapscope.analysis.findings import CAUSES, FindingKind
from overlapscope.analysis.framework import Framework
from overlapscope.trace.run.loader import load_run
from tests.analysis.gpu_runs import MAIN, Rank, write_run
from tests.conftest import REPO
from tests.trace.kineto import kernel, x

PAGEABLE = "Memcpy HtoD (Pageable -> Device)"
CHAIN = ["DistributedDataParallel.forward", "aten::index", "aten::to", "aten::copy_"]


def _runtime(k: Rank, name: str, ts: float, dur: float, corr: int | None = None) -> None:
    args = {"correlation": corr} if corr is not None else None
    k.events.append(x(name, ts, dur, tid=MAIN, cat="cuda_runtime", args=args))


def pageable_copy_while_a_peer_is_late() -> list[Rank]:
    """Both ranks: one step [0, 2000), the forward of a DDP model. Rank 1 starts its
    all-gather late (launched at 600, rank 0 at 50): rank 0's waits from 60 to 700. Inside
    its forward, rank 0 copies an index from pageable memory (``aten::index > aten::to >
    aten::copy_``: cudaMemcpyAsync 100-110, the copy 112-114) and the runtime waits
    (cudaStreamSynchronize 110-700, the stream held by the all-gather): the GPU queue drains,
    and rank 0 launches its next kernel at 710::

        rank 0 CPU  [fwd [index [to [copy_ [memcpy][sync .......... 700]]]]] launch 710
        rank 0 GPU    [all-gather 60 ............................ 700]   [gemm 715-765]
        rank 1 GPU                          [all-gather 610 .. 700]  [gemm 705-755]
    """
    ranks = []
    for r in (0, 1):
        k = Rank(r).steps((1, 0.0, 2000.0)).cpu(CHAIN[0], 0.0, 1500.0)
        k.compute(20, 10, at=10)
        k.all_gather(60 if r == 0 else 610, 640 if r == 0 else 90, at=50 if r == 0 else 600)
        if r == 0:
            k.cpu(CHAIN[1], 95.0, 610.0).cpu(CHAIN[2], 97.0, 606.0).cpu(CHAIN[3], 99.0, 603.0)
            _runtime(k, "cudaMemcpyAsync", 100.0, 10.0, corr=900)
            k.events.append(kernel(PAGEABLE, 112.0, 2.0, 900, stream=7, cat="gpu_memcpy"))
            _runtime(k, "cudaStreamSynchronize", 110.0, 590.0)
        k.compute(715 if r == 0 else 705, 50, at=710 if r == 0 else 650)
        ranks.append(k)
    return ranks


def test_a_pageable_copy_in_the_forward_while_a_peer_is_late(tmp_path: Path) -> None:
    a = analyze(load_run(write_run(tmp_path, pageable_copy_while_a_peer_is_late())))
    assert a.summary.framework is Framework.DDP
    (f,) = [f for f in a.findings if f.kind is FindingKind.HOST_SYNC]
    assert (f.ranks, f.steps, f.phase, f.cause) == ((0,), (1,), "forward", "sync")
    top = f.evidence[0]
    assert list(top.cpu_ops) == [*CHAIN, "cudaStreamSynchronize"]
    assert (top.rank, top.step, top.dur_us) == (0, 1, 590.0)
    # the copy's own call, with the GPU copy it staged
    copy = [e for e in f.evidence if e.cpu_ops[-1] == "cudaMemcpyAsync"]
    assert copy and copy[0].gpu_op == PAGEABLE and list(copy[0].cpu_ops[:-1]) == CHAIN
    # both calls are the pageable copy's: its lever names the op and the fix
    assert [lv.lever for lv in f.levers] == [
        "pin the host memory and copy with non_blocking=True (aten::copy_: tensor.pin_memory(), "
        "DataLoader(pin_memory=True)), or keep the tensor on the GPU"
    ]
    # a collective was in flight: the peer's lateness reached the GPU through the sync
    # a collective was in flight: the peer made the GPU work late, the sync drained the
    # queue; its blocked time counts as the sync's (here no clock bound names the late rank:
    # one collective cannot align the clocks)
    assert (
        "a late peer made the GPU work late and the sync turned that into a drained queue"
        in f.summary
    )
    assert f.stake_us > 0.5 * 590 / 2
    assert not [lv for lv in f.levers if "FSDP" in lv.lever]


STARTS = [200.0, 1300.0, 1900.0, 2300.0, 2600.0, 2800.0]


def test_a_rank_that_starts_late_and_catches_up(tmp_path: Path) -> None:
    """Rank 1's first GPU op runs 990 µs after rank 0's; it is last at every all-gather,
    by 900, 300, 100, 40, 30, 20 µs: a late start carried in from before the window, not a
    slow rank. One profiled step: the finding says it cannot tell whether it recurs."""
    lags = [900.0, 300.0, 100.0, 40.0, 30.0, 20.0]
    on_time = Rank(0).steps((1, 0.0, 3000.0)).compute(10, 50, at=5)
    late = Rank(1).steps((1, 0.0, 3000.0)).compute(1000, 50, at=995)
    for s, lag in zip(STARTS, lags, strict=True):  # every all-gather ends at s + lag + 50
        on_time.all_gather(s, lag + 50.0, at=s - 5)
        late.all_gather(s + lag, 50.0, at=s + lag - 5)
    ranks = [on_time, late]
    a = analyze(load_run(write_run(tmp_path, ranks)))
    (f,) = [f for f in a.findings if f.kind is FindingKind.STRAGGLER]
    assert (f.rank, f.ranks, f.cause) == (1, (1,), "late_start")
    assert f.title == "rank 1 starts the step late"
    assert (
        "caught up" in f.summary and "one profiled step cannot say whether it recurs" in f.summary
    )
    assert f.levers[0].lever.startswith("profile more steps")


def test_two_ranks_whose_backward_is_slower(tmp_path: Path) -> None:
    """Four FSDP2 ranks start together; in the backward (each all-gather issued inside
    ``FSDP::pre_backward``), ranks 2 and 3 arrive late at every all-gather (by 300 and 250
    µs), ranks 0 and 1 on time: slow ranks in the backward, both named, not only the most
    frequent last one."""
    lags = {0: 0.0, 1: 0.0, 2: 300.0, 3: 250.0}
    ranks = []
    for r, lag in lags.items():
        k = Rank(r).steps((1, 0.0, 3000.0)).compute(10, 50, at=5)
        for i, s in enumerate(STARTS):
            at = s + lag - 5
            k.cpu(f"FSDP::pre_backward (b.{i})", at - 3, 10).cpu(
                f"FSDP::all_gather (b.{i})", at - 1, 4
            )
            k.all_gather(s + lag, 50.0 + 300.0 - lag, at=at)
        ranks.append(k)
    a = analyze(load_run(write_run(tmp_path, ranks)))
    assert a.summary.framework is Framework.FSDP2
    (f,) = [f for f in a.findings if f.kind is FindingKind.STRAGGLER]
    assert (f.rank, f.ranks, f.phase, f.cause) == (2, (2, 3), "backward", "slow_rank")
    assert "in the backward, ranks 2, 3 late in most collectives" in f.summary
    assert f.levers[0].lever.startswith("look at the backward on ranks 2, 3: its host")


@pytest.mark.parametrize("name", ["none", "gpu-torch-fsdp1-none", "gpu-torch-fsdp2-item-per-block"])
def test_every_cause_is_a_word_of_the_table(name: str) -> None:
    """The causes a finding gives are those docs/ANALYSIS.md's table defines."""
    a = analyze(load_run(REPO / "traces" / name))
    assert a.findings and {f.cause for f in a.findings} <= set(CAUSES)


def test_data_loading_at_the_step_boundary(tmp_path: Path) -> None:
    """Both ranks: the step's range starts at 0, the data loader runs until 300, and only then
    is the step's first kernel launched (310): 310 µs before the first GPU op, which the step
    span (it begins at that op) leaves out."""
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    ranks = [
        Rank(r).steps((1, 0.0, 1000.0)).cpu(loader, 0.0, 300.0).compute(310, 600, at=305)
        for r in (0, 1)
    ]
    a = analyze(load_run(write_run(tmp_path, ranks)))
    (f,) = [f for f in a.findings if f.kind is FindingKind.STEP_BOUNDARY]
    assert (f.ranks, f.steps, f.phase, f.cause) == ((0, 1), (1,), "step boundary", "data_loading")
    assert [e.cpu_ops for e in f.evidence] == [(loader,), (loader,)]
    assert "in no other figure" in f.summary
    assert f.levers[0].lever.startswith("load the next batch while the GPU works: DataLoader(")
