"""A host stretch is named by the innermost CPU range covering most of it (issue 39 point 2):
the DataLoader's ``__next__`` it lies in, not the short op at its middle; an op inside only
where that op covers most of the stretch. Known answers on hand-built GPU runs
(tests/analysis/gpu_runs.py); the host finding's shares are all of the same idle."""

from __future__ import annotations

from pathlib import Path

import pytest

from overlapscope.analysis import analyze
from overlapscope.analysis.findings import FindingKind
from overlapscope.analysis.findings.text import item_line
from overlapscope.trace.run.loader import load_run
from tests.analysis.gpu_runs import Rank, write_run

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def loader_between_kernels(inner: list[tuple[float, float]]) -> list[Rank]:
    """Both ranks: one step [0, 2000); a kernel 10-100, then the data loader (95-905) with
    ``aten::cat`` calls inside it (``inner``: start, duration), then the next kernel,
    launched at 910, runs 915-1415. The GPU waits for its host over [100, 915), the host
    stretch [100, 910) (its middle, 505, lies in every ``aten::cat`` given)::

        CPU  [loader 95 ........ [cat] ........ 905] launch 910
        GPU  [gemm 10-100]                           [gemm 915-1415]
    """
    ranks = []
    for r in (0, 1):
        k = Rank(r).steps((1, 0.0, 2000.0)).compute(10, 90, at=5).cpu(LOADER, 95.0, 810.0)
        for start, dur in inner:
            k.cpu("aten::cat", start, dur)
        ranks.append(k.compute(915, 500, at=910))
    return ranks


@pytest.mark.parametrize(
    ("inner", "named"),
    [
        pytest.param([(480.0, 40.0)], LOADER, id="short-op-at-the-middle-names-the-loader"),
        pytest.param([(110.0, 780.0)], "aten::cat", id="op-covering-most-is-named"),
        pytest.param([(200.0, 300.0), (502.0, 300.0)], LOADER, id="two-halves-name-the-loader"),
    ],
)
def test_a_stretch_is_named_by_the_range_covering_most_of_it(
    tmp_path: Path, inner: list[tuple[float, float]], named: str
) -> None:
    a = analyze(load_run(write_run(tmp_path, loader_between_kernels(inner))))
    host = a.host_ops[a.host_ops["cause"] == "host_bound"]
    assert host["host_op"].tolist() == [named, named]  # (one stretch per rank)
    assert host["host_activity"].tolist() == ["data loading", "data loading"]
    (f,) = [f for f in a.findings if f.kind is FindingKind.HOST_STARVED]
    # its strongest items: each rank's stretch, named so (then each step's 10 µs lead)
    # (its chain: the loader, then the op where the op names it)
    chain = (LOADER,) if named == LOADER else (LOADER, named)
    assert [(e.rank, e.dur_us, e.cpu_ops) for e in f.evidence[:2]] == [
        (0, 815.0, chain),
        (1, 815.0, chain),
    ]
    # one population: the activity's share and its range's share are both of the 815 µs
    # of host-caused idle the sentence names
    assert "over the 815 µs/step of that GPU idle" in f.summary
    assert f"data loading 100% ({named} 100%)" in f.summary
    if named == LOADER:
        assert "aten::cat" not in f.summary
    assert f.levers[0].lever.startswith("more data-loader workers")


def test_the_evidence_carries_the_cpu_op_chain_outermost_first(tmp_path: Path) -> None:
    """Issue 39 point 1: an evidence item carries the CPU ranges holding the one that names
    its stretch, outermost first, ending at it (not the ProfilerStep: not a thread's op);
    an op inside the loader that covers most of the stretch ends the chain. The steps'
    10 µs leads lie in no range: their items carry none."""
    ranks = loader_between_kernels([(110.0, 780.0)])
    for k in ranks:
        k.cpu("train_step", 1.0, 1990.0).cpu("## forward ##", 50.0, 900.0)
    a = analyze(load_run(write_run(tmp_path, ranks)))
    (f,) = [f for f in a.findings if f.kind is FindingKind.HOST_STARVED]
    chain = ("train_step", "## forward ##", LOADER, "aten::cat")
    assert [(e.rank, e.dur_us, e.cpu_ops) for e in f.evidence[:2]] == [
        (0, 815.0, chain),
        (1, 815.0, chain),
    ]
    host = a.host_ops[a.host_ops["cause"] == "host_bound"]
    assert host["host_op"].tolist() == ["aten::cat", "aten::cat"]  # (unchanged: the innermost)
    assert "CPU train_step > ## forward ## > " + LOADER + " > aten::cat" in item_line(f.evidence[0])
