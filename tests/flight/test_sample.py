"""The shipped sample run with its dumps (traces/flight-fsdp2-gloo2-slow/): torch FSDP2 on 2
gloo ranks, rank 1 slowed in unit 1's forward, profiled, with a Flight Recorder dump per
rank. Its diagnosis names rank 1 and the unit whose all-gather it issues late."""

from __future__ import annotations

from overlapscope.analysis.findings import FindingKind
from overlapscope.flight.api import analyze_dumps
from overlapscope.flight.discover import find_dumps
from tests.conftest import REPO

SAMPLE = REPO / "traces" / "flight-fsdp2-gloo2-slow"


def test_the_sample_carries_a_dump_per_rank_beside_its_traces() -> None:
    dumps, rest = find_dumps([SAMPLE])
    assert [p.relative_to(SAMPLE).as_posix() for p in dumps] == [
        "comm_traces/rank_0",
        "comm_traces/rank_1",
    ]
    assert rest == [SAMPLE]


def test_the_sample_names_the_slowed_rank_and_its_unit() -> None:
    from overlapscope.analysis.api import analyze
    from overlapscope.trace.run.loader import load_run

    dumps, _ = find_dumps([SAMPLE])
    traces = analyze(load_run([SAMPLE], progress=False))
    r = analyze_dumps(dumps, trace_collectives=traces.collectives)
    late = [f for f in r.findings if f.kind is FindingKind.STRAGGLER]
    assert late[0].rank == 1
    assert late[0].title == "rank 1 issues the forward all-gather (unit 2) late"
    assert "between the forward all-gather (unit 1) and it" in late[0].summary
