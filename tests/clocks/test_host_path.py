"""A critical path that goes through the host (issue 30 point 3): known-answer hand-built
multi-rank GPU runs, one of them host-bound. Where the path meets a GPU waiting for its
host it continues on the CPU thread that launched the next work, naming the op launched
late and what the thread was doing; the links still add up to the step and the 10%
what-if is replayed on the new path."""

from __future__ import annotations

from pathlib import Path

import pytest

from overlapscope.analysis import analyze
from overlapscope.analysis.critical_path.report import path_paragraph
from overlapscope.trace.run.loader import load_run
from tests.analysis.gpu_runs import GEMM, Rank, write_run

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
OPTIM = "Optimizer.step#SGD.step"


def host_bound() -> list[Rank]:
    """Both ranks: CPU step [0, 1000); the data loader, then a 50 µs kernel, the optimizer's
    Python, another 50 µs kernel, then an all-gather. Rank 1's host is slower: loader until
    300 (rank 0: 200), optimizer until 600 (rank 0: 400); rank 0 waits for it::

        rank 1 CPU  [loader 0-300][optimizer 305-595]
        rank 1 GPU               [gemm 310-360]      [gemm 610-660] [ag 670-760]
        rank 0 GPU          [gemm 210-260] [gemm 410-460] [ag 470 ...... 760]
    """
    ranks = []
    for r, slow in ((0, 0.0), (1, 100.0)):
        k = Rank(r).steps((1, 0.0, 1000.0)).cpu(LOADER, 0, 200 + slow)
        k.compute(210 + slow, 50, at=200 + slow).cpu(OPTIM, 205 + slow, 190 + slow)
        k.compute(410 + 2 * slow, 50, at=400 + 2 * slow)
        k.all_gather(470 + 2 * slow, 290 - 2 * slow, at=460 + 2 * slow)
        ranks.append(k)
    return ranks


def compute_bound() -> list[Rank]:
    """The same shape, every op launched long before it runs (the CPU ahead of the GPU):
    rank 1's second kernel is 300 µs long, so rank 0 waits for it."""
    ranks = []
    for r, long in ((0, 0.0), (1, 250.0)):
        k = Rank(r).steps((1, 0.0, 1000.0))
        k.compute(10, 200, at=1).compute(210, 50 + long, at=2)
        k.all_gather(260 + long, 290 - long, at=3)
        ranks.append(k)
    return ranks


def _analysed(tmp: Path, ranks: list[Rank]):
    return analyze(load_run(write_run(tmp, ranks)))


def test_host_bound_path_runs_through_the_slow_host(tmp_path: Path) -> None:
    a = _analysed(tmp_path / "host", host_bound())
    links = a.path.links.sort_values("order", ascending=False)
    got = [
        (int(r.rank), r.kind, round(r.start_us), round(r.end_us))
        for r in links.itertuples(index=False)
    ]
    assert got == [
        (1, "host", 0, 310),  # rank 1's data loader until it launched its first gemm
        (1, "compute", 310, 360),
        (1, "host", 360, 610),  # its optimizer's Python until the second gemm
        (1, "compute", 610, 660),
        (1, "idle", 660, 670),  # the all-gather queued at 660: launch latency
        (0, "comm", 670, 760),  # the transfer, once rank 1 arrived (rank 0's wait: slack)
        (0, "idle", 760, 1000),  # the CPU step's tail
    ]
    host = links[links["kind"] == "host"].sort_values("start_us")
    assert host["host_activity"].tolist() == ["data loading", "optimizer"]
    assert host["host_op"].tolist() == [LOADER, OPTIM]
    assert host["late_op"].tolist() == [GEMM, GEMM]
    assert host["cause"].tolist() == ["host_bound", "host_bound"]
    assert (host["host_tid"] == 1).all()
    step = a.path.steps.iloc[0]
    assert links["dur_us"].sum() == pytest.approx(step["step_us"])
    assert step["host_us"] == pytest.approx(310 + 250)
    assert step["idle_us"] == pytest.approx(10 + 240)
    # 10% faster, each host stretch of rank 1 launches that much sooner: the step replayed
    # through the graph gets it all back (rank 1 is on the path all the way)
    assert host["saving_us"].tolist() == pytest.approx([31.0, 25.0])
    text = path_paragraph(a.path)
    assert "host 56%" in text
    assert f"rank 1's host (data loading, in {LOADER})" in text
    assert f"so it launches {GEMM} sooner saves 31 µs" in text


def test_a_gpu_ahead_of_its_host_has_no_host_link_but_the_first_launch(tmp_path: Path) -> None:
    """Only the step's lead is the host's: its first kernel cannot start before the CPU
    step launches it (here at 1 µs, running from 10)."""
    a = _analysed(tmp_path / "gpu", compute_bound())
    links = a.path.links
    host = links[links["kind"] == "host"]
    assert [(round(h.start_us), round(h.end_us)) for h in host.itertuples()] == [(0, 10)]
    work = links[links["kind"] != "idle"]  # (the CPU step's tail is idle)
    longest = work.loc[work["dur_us"].idxmax()]
    assert (int(longest["rank"]), longest["kind"], longest["dur_us"]) == (1, "compute", 300.0)
    assert links["dur_us"].sum() == pytest.approx(a.path.steps["step_us"].iloc[0])
    assert a.path.steps["host_us"].iloc[0] == pytest.approx(10.0)


def test_host_finding_names_the_path_and_the_levers(tmp_path: Path) -> None:
    a = _analysed(tmp_path / "host", host_bound())
    (f,) = [f for f in a.findings if f.kind.value == "host_starved"]
    assert f is a.findings[0]  # the largest stake
    # idle host-bound gaps: rank 0 [260,410) 150, rank 1 [360,610) 250; and each rank's
    # all-gather was launched as its GPU ran out of work (460, 660): its exposed transfer
    # (90 µs; rank 0's 200 before it is waiting for rank 1) was issued late by the host
    assert f.stake_us == pytest.approx(((150 + 90) + (250 + 90)) / 2)
    # one population per sentence: what the thread was doing and the range it was in, both
    # shares of the 200 µs/step of host-caused idle the sentence names (in the step spans:
    # the optimizer); the loader ran before each step's first GPU op, outside the span the
    # 58% is measured on (the step boundary's), so it is not in it
    assert (
        "over the 200 µs/step of that GPU idle, the launching thread was doing (each stretch "
        f"named by the innermost CPU range covering most of it): optimizer 100% ({OPTIM} 100%)"
        in f.summary
    )
    assert LOADER not in f.summary
    assert "3 GPU ops per step" in f.summary
    assert f.change.startswith("a fused optimizer step")
    assert 'torch.compile(mode="reduce-overhead")' in f.change
