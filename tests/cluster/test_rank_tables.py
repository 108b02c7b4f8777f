"""A reduce task's tables (:func:`tasks.rank_tables`) equal, to the bit and the dtype, those
of the former code, whose row selections are kept below as the reference: each rank of the
shipped runs, a shared GPU trace (rows outside its steps), one event and none."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from overlapscope.analysis.metrics import comm_exposure, counted_mask
from overlapscope.cluster import tasks
from overlapscope.trace.loader import RunTraces, load_run
from overlapscope.trace.schema import EventLane
from tests.conftest import EXTERNAL_TRACES, REPO

# --- the former row selections (reference) ---


def _former_rows(run: RunTraces) -> dict[str, pd.DataFrame]:
    """The comm and path tables as the former ``rank_tables`` selected them."""
    counted = counted_mask(run)
    if not counted.all():
        run = dataclasses.replace(run, events=run.events[counted])
        counted = counted[counted]
    exposure = comm_exposure(run, counted)
    ev = run.events
    comm = ev.loc[exposure.index, tasks.COMM_COLUMNS[:-1]].assign(exposed_us=exposure.to_numpy())
    lanes = [EventLane.COMPUTE.value, EventLane.COMM.value, EventLane.WAIT.value]
    used = ev["lane"].isin([*lanes, EventLane.STEP.value]) & (ev["step"] >= 0)
    return {
        "comm": comm.reset_index(drop=True),
        "path": ev.loc[used, tasks.PATH_COLUMNS].reset_index(drop=True),
    }


# --- the checks ---


def _same(run: RunTraces) -> dict[str, pd.DataFrame]:
    new = tasks.rank_tables(run)
    for name, former in _former_rows(run).items():
        assert list(new[name].dtypes) == list(former.dtypes), name
        pd.testing.assert_frame_equal(new[name], former, check_exact=True)
        assert new[name].to_json() == former.to_json()
    return new


def _one_rank(run: RunTraces, rank: int) -> RunTraces:
    info = next(i for i in run.ranks if i.rank == rank)
    ev = run.events
    return dataclasses.replace(run, events=ev[ev["rank"] == rank], ranks=(info,))


RUNS = sorted(p for p in (REPO / "traces").iterdir() if (p / "run.json").is_file())


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.name)
def test_rank_rows_equal_the_former_ones_on_shipped_runs(path):
    run = load_run(path)
    for info in run.ranks:
        tables = _same(_one_rank(run, info.rank))
        assert len(tables["comm"]) and len(tables["path"])


def test_rank_rows_equal_the_former_ones_on_a_gpu_trace():
    trace = EXTERNAL_TRACES / "hta-trace-diff-test-rank1.json.gz"
    if not trace.exists():
        pytest.skip(f"{trace} absent (the shared external traces are not checked out)")
    run = load_run(trace)
    assert not counted_mask(run).all()
    tables = _same(run)
    assert len(tables["comm"]) and len(tables["path"])


def test_rank_rows_of_one_event_and_of_none():
    run = _one_rank(load_run(RUNS[0]), 0)
    ev = run.events
    comm = ev[(ev["lane"] == EventLane.COMM.value) & (ev["step"] >= 0)]
    assert len(_same(dataclasses.replace(run, events=comm.iloc[:1]))["comm"]) == 1
    quiet = _same(dataclasses.replace(run, events=ev[ev["lane"] == EventLane.OTHER.value]))
    assert quiet["comm"].empty and quiet["path"].empty
