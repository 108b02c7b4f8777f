"""Known answers of the checks that traces are one job's (overlapscope/trace/run/same_run.py) on
hand-built traces: step numbers, start times, collective sequence numbers per group, file
names; the majority decides which trace is foreign."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from overlapscope.errors import UserError
from overlapscope.trace.run.loader import load_run
from tests.trace.kineto import BASE_NS, step, trace, write, x

S = 10**9  # ns per second


def comms(step_no: int, first_seq: int, n: int = 3, t0: float = 0.0) -> list[dict[str, Any]]:
    """A step of ``n`` all-reduces on group "0" numbered from ``first_seq`` (torch's Seq)."""
    events = [step(step_no, t0, 1000)]
    for k in range(n):
        args = {"Process Group Name": "0", "Seq": first_seq + k, "Collective name": "allreduce"}
        events.append(x("record_param_comms", t0 + 10 + 100 * k, 50, cat="cpu_op", args=args))
    return events


def ranks(tmp_path: Path, *per_rank: tuple[list[dict[str, Any]], int]) -> Path:
    """One trace per rank: (events, base time in ns)."""
    for r, (events, base) in enumerate(per_rank):
        write(tmp_path / f"rank-{r}.json", trace(r, len(per_rank), events, base_ns=base))
    return tmp_path


def test_one_job_passes_without_a_word(tmp_path):
    run = load_run(ranks(tmp_path, *[(comms(5, 40), BASE_NS)] * 3))
    assert [r.rank for r in run.ranks] == [0, 1, 2]
    assert not [w for w in run.warnings if "collectives" in w or "steps" in w]


def test_steps_of_another_window_are_refused_the_majority_decides(tmp_path):
    d = ranks(tmp_path, (comms(5, 40), BASE_NS), (comms(9, 40), BASE_NS), (comms(5, 40), BASE_NS))
    with pytest.raises(UserError, match=r"rank-1\.json: recorded steps 9, rank-0\.json steps 5"):
        load_run(d)
    run = load_run(d, allow_missing_ranks=True)
    assert [r.rank for r in run.ranks] == [0, 2]


def test_steps_that_differ_but_overlap_are_a_warning(tmp_path):
    two = comms(5, 40) + comms(6, 43, t0=1000)
    run = load_run(ranks(tmp_path, (two, BASE_NS), (comms(5, 40), BASE_NS)))
    assert any("ranks recorded different steps (rank-1.json: 5;" in w for w in run.warnings)


@pytest.mark.parametrize(("shift_s", "refused"), [(0.5, False), (30, True), (-3600, True)])
def test_a_step_starting_far_from_the_others_is_refused(tmp_path, shift_s, refused):
    d = ranks(tmp_path, (comms(5, 40), BASE_NS), (comms(5, 40), BASE_NS + int(shift_s * S)))
    if not refused:  # within the hosts' clock slack: one job
        assert len(load_run(d).ranks) == 2
        return
    with pytest.raises(UserError, match=r"rank-1\.json: step 5 starts .* rank-0\.json's"):
        load_run(d)


def test_traces_without_steps_must_overlap_in_time(tmp_path):
    events = [x("aten::mm", 0, 100, cat="cpu_op"), x("aten::mm", 50e6, 100, cat="cpu_op")]
    later = ranks(tmp_path, (events, BASE_NS), (events, BASE_NS + 45 * S))  # 50 s long each
    assert len(load_run(later).ranks) == 2  # started apart, but recorded together
    d = ranks(tmp_path, (events, BASE_NS), (events, BASE_NS + 240 * S))
    with pytest.raises(UserError, match=r"its events start 4\.0 min after rank-0\.json's"):
        load_run(d)


def test_sequence_numbers_of_another_job_are_refused(tmp_path):
    """Same steps, same times, but rank 1's all-reduces of group 0 are numbered 140-142:
    another job's (the same program run longer before it was profiled)."""
    d = ranks(tmp_path, (comms(5, 40), BASE_NS), (comms(5, 140), BASE_NS))
    with pytest.raises(UserError, match=r"rank-1\.json: issued collectives 140-142 of group 0"):
        load_run(d)


def test_a_different_count_of_collectives_is_a_warning(tmp_path):
    d = ranks(tmp_path, (comms(5, 40), BASE_NS), (comms(5, 40, n=2), BASE_NS),
              (comms(5, 40), BASE_NS))  # fmt: skip
    run = load_run(d)
    assert any("ranks issued different numbers of collectives (rank-1.json: 2 in step 5 of "
               "group 0" in w for w in run.warnings), run.warnings  # fmt: skip


def test_names_that_disagree_with_distributed_info_are_a_warning_outside_a_run(tmp_path):
    write(tmp_path / "rank-0.json", trace(1, 2, comms(5, 40)))
    write(tmp_path / "rank-1.json", trace(0, 2, comms(5, 40)))
    run = load_run(tmp_path)
    assert any("file names disagree with the ranks in distributedInfo (rank-0.json holds "
               "rank 1, rank-1.json holds rank 0)" in w for w in run.warnings)  # fmt: skip
    named = load_run(tmp_path, rank_from_names=True)
    assert any("rank-0.json: --rank-from-name: rank 0 taken from the name; its "
               "distributedInfo says rank 1" in w for w in named.warnings)  # fmt: skip
