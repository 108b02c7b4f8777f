"""Two ranks whose backward is slower with the same ops (issue 39 points 4 and 7): the
straggler finding names both, the phase, and the measure that differs (here the launch
calls and the idle between kernels, not the GPU ops' time), in its words, its lever and its
evidence items' measures. A hand-built FSDP2 run (tests/analysis/gpu_runs.py)."""

from __future__ import annotations

from pathlib import Path

from overlapscope.analysis import analyze
from overlapscope.analysis.findings import FindingKind
from overlapscope.trace.run.loader import load_run
from tests.analysis.gpu_runs import Rank, write_run

# The idle before each backward kernel (its host launched it late) and its launch calls' µs.
SLOW = {0: (0.0, 5.0), 1: (0.0, 5.0), 2: (60.0, 7.0), 3: (50.0, 7.0)}
KERNELS, KERNEL_US, TRANSFER_US = 3, 100.0, 50.0


def _block_ends(starts: dict[int, float]) -> float:
    """An all-gather ends once the last rank arrived and its transfer ran."""
    return max(starts.values()) + TRANSFER_US


def slow_backward(fsdp: bool = True) -> list[Rank]:
    """Four FSDP2 ranks enter the backward together (at 1000) and run three blocks, each an
    all-gather inside ``FSDP::pre_backward`` then three 100 µs kernels. Ranks 0 and 1 launch
    their kernels ahead (back to back, 5 µs launch calls); ranks 2 and 3 launch each one late
    (60 and 50 µs of idle before it, 7 µs launch calls): the same ops take them longer, and
    they arrive last at the next blocks' all-gathers (by 180 and 150 µs)::

        rank 0  [ag 1000 ... 1050][k][k][k]  [ag 1360 ......... 1590][k][k][k] ...
        rank 2  [ag 1000 ... 1050] [k] [k] [k] [ag 1540 .. 1590] [k] [k] [k] ...

    ``fsdp`` False: the same GPU work without FSDP's ranges (a trace that names no phases).
    """
    ranks = {r: Rank(r).steps((1, 0.0, 4000.0)).compute(10, 50, at=5) for r in SLOW}
    issue = dict.fromkeys(SLOW, 1000.0)
    for i in range(3):
        end = _block_ends(issue)
        for r, k in ranks.items():
            idle, call = SLOW[r]
            if fsdp:
                k.cpu(f"FSDP::pre_backward (b.{i})", issue[r] - 8, 6)
                k.cpu(f"FSDP::all_gather (b.{i})", issue[r] - 6, 2)
            k.all_gather(issue[r], end - issue[r], at=issue[r] - 5)
            t = end
            for j in range(KERNELS):
                start = t + idle
                at = start - call - 1 if idle else end - 40 + j * 6
                k.compute(start, KERNEL_US, at=at)
                k.events[-2]["dur"] = call  # (the launch call's duration)
                t = start + KERNEL_US
            if fsdp:
                k.cpu(f"FSDP::post_backward_reduce (b.{i})", t + 2, 4)
            issue[r] = t + 10
    return list(ranks.values())


def test_two_ranks_whose_backward_is_slower_with_the_same_ops(tmp_path: Path) -> None:
    a = analyze(load_run(write_run(tmp_path, slow_backward())))
    (f,) = [f for f in a.findings if f.kind is FindingKind.STRAGGLER]
    assert (f.rank, f.ranks, f.phase, f.cause) == (2, (2, 3), "backward", "slow_rank")
    # the phase, the same ops, and the measures: which differ and which are alike
    assert "their backward takes 1,370-1,460 µs against 920 µs on the other ranks" in f.summary
    assert "with the same 9 GPU ops" in f.summary
    assert "what differs: median launch call 7.0 against 5.0 µs, idle 470-560 against 20 µs" in (
        f.summary
    )
    assert "(GPU op time 900 against 900 µs: alike)" in f.summary
    lever = f.levers[0]
    assert lever.lever.startswith("look at the backward on ranks 2, 3: their host's CPU")
    assert "GPU: the same ops run longer" not in lever.lever
    # structured: the slow ranks' items first, each with its measures
    first = f.to_dict()["evidence"][0]
    assert (first["rank"], first["step"], first["dur_us"]) == (2, 1, 1460.0)
    assert first["measures"] == {
        "op_us": 900.0,
        "launch_median_us": 7.0,
        "idle_us": 560.0,
        "num_ops": 9.0,
    }
    assert [e.rank for e in f.evidence[:2]] == [2, 3]


def test_without_phases_the_step_is_compared(tmp_path: Path) -> None:
    """The same run without FSDP's ranges names no phases: the step's GPU work is compared
    (its first kernel, 50 µs, alike on every rank), and the same measures differ."""
    a = analyze(load_run(write_run(tmp_path, slow_backward(fsdp=False))))
    (f,) = [f for f in a.findings if f.kind is FindingKind.STRAGGLER]
    assert (f.ranks, f.phase, f.cause) == ((2, 3), None, "slow_rank")
    assert "their step's GPU work (the trace names no phases) takes" in f.summary
    assert "with the same 10 GPU ops; what differs: median launch call 7.0 against 5.0 µs" in (
        f.summary
    )
    assert f.levers[0].lever.startswith("look at the step on ranks 2, 3: their host's CPU")
