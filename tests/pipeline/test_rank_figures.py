"""A reduce task's events (:func:`tasks.rank_events`) and figures (:func:`registry.
rank_tables`) equal, to the bit and the dtype, those of the former code, whose row selections and event
read are kept below as the reference: each rank of the shipped runs, a shared GPU trace
(rows outside its steps), missing values, one event and none."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from overlapscope.analysis import registry
from overlapscope.analysis.clocks.alignment import offset_at
from overlapscope.analysis.timeline.metrics import (
    comm_exposure,
    counted_mask,
    lane_sets,
    step_table,
)
from overlapscope.analysis.waiting.tables import wait_tables
from overlapscope.cache import Cache, code_digest, entry_key
from overlapscope.phases import Lane
from overlapscope.pipeline import tasks
from overlapscope.pipeline.executor import LocalExecutor
from overlapscope.pipeline.plan import Inputs, plan
from overlapscope.table_files import read_events, write_events
from overlapscope.trace.run.loader import RunTraces, load_run
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
    comm = ev.loc[exposure.index, registry.COMM_COLUMNS[:-1]].assign(exposed_us=exposure.to_numpy())
    sets = lane_sets(run, counted)
    waits = wait_tables(run, counted, step_table(run, counted, sets), sets, exposure)
    comm = comm.assign(late=waits.late)
    lanes = [Lane.COMPUTE.value, Lane.COMM.value, Lane.WAIT.value]
    used = ev["lane"].isin([*lanes, Lane.STEP.value]) & (ev["step"] >= 0)
    return {
        "comm": comm.reset_index(drop=True),
        "path": ev.loc[used, registry.PATH_COLUMNS].reset_index(drop=True),
    }


def _former_rank_events(job: tasks.RankJob, cache: Cache) -> pd.DataFrame:
    stored = [c for c in tasks.REDUCE_COLUMNS if c != "rank"]
    read = read_events(cache.events_path(job.key), stored)
    columns = {"rank": np.full(len(read), job.info.rank, dtype=np.int32)}
    for c in stored:
        if c in ("ts_us", "end_us"):
            columns[c] = read[c].to_numpy() + job.shift_us
        elif c in tasks._CATEGORIES:
            columns[c] = read[c].cat.set_categories(job.schema[c].cat.categories)
        else:
            columns[c] = read[c]
    ev = pd.DataFrame(columns, copy=False)
    shift = offset_at(job.offsets, ev["rank"].to_numpy(), ev["ts_us"].to_numpy())
    if np.any(shift):
        ev["ts_us"] = ev["ts_us"].to_numpy() - shift
        ev["end_us"] = ev["end_us"].to_numpy() - shift
    return ev


# --- the checks ---


def _same(run: RunTraces) -> dict[str, pd.DataFrame]:
    new = registry.rank_tables(run)
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
    comm = ev[(ev["lane"] == Lane.COMM.value) & (ev["step"] >= 0)]
    assert len(_same(dataclasses.replace(run, events=comm.iloc[:1]))["comm"]) == 1
    quiet = _same(dataclasses.replace(run, events=ev[ev["lane"] == Lane.OTHER.value]))
    assert quiet["comm"].empty and quiet["path"].empty


def _jobs(files: list[Path], root: Path) -> tuple[Cache, list[tasks.RankJob]]:
    """Each file parsed into the cache at ``root``, and the run's reduce jobs."""
    for f in files:
        tasks.parse_to_cache(str(f), 0, str(root), entry_key(f, 0), code_digest())
    cache = Cache(root)
    _, _, jobs = plan(Inputs(tuple(files), allow_missing_ranks=True), LocalExecutor(), cache)
    return cache, jobs


def _same_events(job: tasks.RankJob, cache: Cache) -> pd.DataFrame:
    new, former = tasks.rank_events(job, cache), _former_rank_events(job, cache)
    assert list(new.columns) == list(former.columns)
    assert list(new.dtypes) == list(former.dtypes)
    if len(new) == 0:  # (set_categories leaves no codes in their former width: no rows)
        return former
    pd.testing.assert_frame_equal(new, former, check_exact=True)
    for i in range(new.shape[1] if len(new) else 0):  # writable, as pandas' own columns are
        new.iloc[:1, i] = new.iloc[:1, i].to_numpy()  # (a read-only buffer raises here)
    return former


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.name)
def test_rank_events_equal_the_former_ones_on_shipped_runs(path, tmp_path):
    files = sorted(path.glob("*.json.gz"))
    cache, jobs = _jobs(files, tmp_path)
    assert len(jobs) == len(files)  # one per rank
    for job in jobs:
        assert len(_same_events(job, cache))


def test_rank_events_with_missing_values_one_event_and_none(tmp_path):
    cache, jobs = _jobs([sorted(RUNS[0].glob("*.json.gz"))[0]], tmp_path)
    stored = cache.events_path(jobs[0].key)
    events = read_events(stored, None)
    rng = np.random.default_rng(5)
    holes = events.copy()
    for c in ("dur_us", "name", "unit", "phase", "lane"):
        holes.loc[rng.random(len(holes)) < 0.2, c] = np.nan
    for frame, rows in ((holes, len(holes)), (events.iloc[3:4], 1), (events.iloc[:0], 0)):
        write_events(stored, frame.reset_index(drop=True))
        assert len(_same_events(jobs[0], cache)) == rows
