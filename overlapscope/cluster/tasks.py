"""The kinds of Dask task of ``--dask``, each run on a worker (module docstring of
:mod:`overlapscope.cluster.run` for how they chain).

* :func:`parse_to_cache`: one rank file -> its recognised events (Arrow IPC) and a few-KB
  :class:`~overlapscope.cluster.cache.RankMeta` for the client;
* :func:`reduce_rank`: one rank's cached events -> its tables (steps, ranks, units, the
  collectives with their exposure, compute per unit, levers, exposed intervals, the rows the
  critical path reads, and the timeline when asked), with the analysis' own per-rank
  functions on a one-rank run: the same figures as the local path, since each of them reads
  one rank's rows only; :func:`timeline_rank`: the timeline of a rank reduced without it;
* :func:`step_path`: the critical path of one step from every rank's path rows of that step.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import json
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# Imported with this module, once per worker process: the cache's Arrow files are written
# and read through these (pandas imports pyarrow.compute, which the row filters use; frames
# are converted by pandas_compat), and importing them on first use cost the first tasks of
# every worker CPU time.
import pyarrow.ipc
import pyarrow.pandas_compat

from overlapscope.analysis.clocks import offset_at
from overlapscope.analysis.critical_path import critical_path
from overlapscope.analysis.levers import lever_table
from overlapscope.analysis.metrics import (
    comm_exposure,
    counted_mask,
    exposed_intervals,
    lane_sets,
    rank_table,
    step_table,
    take_columns,
    timeline_table,
)
from overlapscope.analysis.partition import any_of
from overlapscope.analysis.units import compute_by_unit, unit_table
from overlapscope.cluster.cache import (
    RankCache,
    RankMeta,
    analysis_digest,
    atomic,
    parser_digest,
    read_arrow,
    read_table,
    write_table,
)
from overlapscope.manifest import RunManifest
from overlapscope.trace.loader import RankInfo, RunTraces, _parse_one, _Parsed
from overlapscope.trace.schema import EVENT_COLUMNS, EventLane

# Likewise what pandas imports on first use in the parse: its Arrow strings' version check
# (the categories of the names; ~3 ms).
with contextlib.suppress(ImportError):  # (a module of theirs, which may move)
    import pyarrow.vendored.version  # noqa: F401

# The rank's small tables and the steps of its path rows, pickled (written last: it marks
# the folder whole). Reading 7 Parquet files per rank cost the client ~30 ms per rank.
DONE = "summary.pkl"
# The lanes of the critical path's rows: its work and its steps' marks.
PATH_LANES = [
    *(EventLane.COMPUTE.value, EventLane.COMM.value, EventLane.WAIT.value),
    EventLane.STEP.value,
]
PATH_COLUMNS = ["rank", "step", "ts_us", "end_us", "lane", "unit", "phase", "group", "seq"]
CLOCK_COLUMNS = ["lane", "kind", "group", "step", "seq", "ts_us", "end_us"]
COMM_COLUMNS = [  # (exposed_us last: the one not in the event table)
    *("rank", "group", "step", "seq", "kind", "unit", "phase", "bytes"),
    *("ts_us", "end_us", "dur_us", "exposed_us"),
]
# Tables of one rank in summary.pkl; the event-sized ones, the timeline (every drawable
# event, made and read only when asked for: ``--csv``, the dashboard) and the path rows
# (read a step at a time), as Arrow IPC files (``cache.write_table``).
SMALL_TABLES = ("ranks", "steps", "units", "comm", "compute", "levers", "exposed")
TIMELINE = "timeline"
TIMELINE_FILE = f"{TIMELINE}.arrow"
BIG_TABLES = (TIMELINE, "path")
_CATEGORIES = [c for c, t in EVENT_COLUMNS.items() if t == "category"]
# The event table's columns but those no per-rank table reads (the category, the GPU stream,
# the correlation id): less to read from the cache and to copy in every row selection.
REDUCE_COLUMNS = [c for c in EVENT_COLUMNS if c not in ("cat", "stream", "correlation")]


# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


@contextlib.contextmanager
def released() -> Iterator[None]:
    """Hands the memory a task freed back to the system when it ends: a worker runs task
    after task, and what pyarrow's pool and glibc's arenas keep of one task's peak (~80 MB
    after a 56 MB rank file, measured) would lift the next task's peak by as much.

    Arrow's buffers come from the system allocator, as ``--dask local`` starts its workers
    (``client.WORKER_ENV``): set here too, so that workers started by hand get it without
    the variable in their environment.

    glibc's mmap and trim thresholds are fixed at the maxima its own dynamic thresholds
    rise to in a long-running process (64-bit Linux): the parse's multi-megabyte buffers then
    reuse freed heap memory instead of each mapping fresh pages that fault in anew (~25 ms
    of system CPU on a 56 MB rank, measured; the same peak), and the trim above hands it
    back at the end."""
    import pyarrow

    if pyarrow.default_memory_pool().backend_name != "system":
        pyarrow.set_memory_pool(pyarrow.system_memory_pool())
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024)
        libc.mallopt(_M_TRIM_THRESHOLD, 64 * 1024 * 1024)
    try:
        yield
    finally:
        # No gc.collect(): the tables hold no cycles, and in a worker holding Dask's state a
        # collection cost 20+ ms a task (measured), more than the task on a small rank.
        pyarrow.default_memory_pool().release_unused()
        with contextlib.suppress(OSError, AttributeError):
            _hand_back(ctypes.CDLL("libc.so.6"))


_GLIBC_TRIM_THRESHOLD = 128 * 1024  # glibc's default


def _hand_back(libc: ctypes.CDLL) -> None:
    """Returns the free memory of this thread's malloc arena to the system.

    A Dask worker runs its tasks on a thread of its own, whose glibc arena is not the main
    one: ``malloc_trim`` releases the free chunks inside it but not its free top, which
    glibc shrinks only when a large block is freed into it with the top above the trim
    threshold (fixed high for the task). So the threshold goes back to glibc's default and
    one large block is freed: a worker thread kept ~30 MB more after each task without it
    (measured with the tasks run on a thread, as Dask does)."""
    libc.malloc_trim(0)
    libc.mallopt(_M_TRIM_THRESHOLD, _GLIBC_TRIM_THRESHOLD)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(1024 * 1024))


def _same_code(digest: str, expected: str) -> None:
    if digest != expected:
        raise RuntimeError(
            "this worker's overlapscope differs from the client's; install the same "
            "overlapscope version on the workers"
        )


def parse_to_cache(path: str, world_hint: int, cache_root: str, key: str, digest: str) -> str:
    """Parse one rank file, store its events and meta, return its key. ``digest``: the
    client's parser digest; a worker whose overlapscope parses differently refuses."""
    _same_code(digest, parser_digest())
    with released():
        _parse_and_store(Path(path), world_hint, RankCache(Path(cache_root)), key)
    return key


def _parse_and_store(path: Path, world_hint: int, cache: RankCache, key: str) -> None:
    parsed = _parse_one(path, world_hint)
    if not isinstance(parsed, _Parsed):
        cache.write(key, parsed, pd.DataFrame())
        return
    events = parsed.table.events
    comm = (events["lane"] == EventLane.COMM.value) & (events["seq"] >= 0)
    comm.iloc[:1] = True  # the first row names the rank to the clock estimate
    light = dataclasses.replace(parsed.table, events=events.iloc[:0])
    meta = RankMeta(  # (the memory curve is the what-if's, which reads runs locally)
        parsed=_Parsed(parsed.raw.without_memory(), light),
        clock_rows=events.loc[comm.to_numpy(), CLOCK_COLUMNS].reset_index(drop=True),
        num_events=len(events),
        has_gpu=bool(events["on_gpu"].any()),
    )
    cache.write(key, meta, events)


@dataclass(frozen=True, slots=True)
class RankJob:
    """What :func:`reduce_rank` needs of the whole run for one rank (small).

    ``shift_us``: the loader's shift of this rank to the run's epoch; ``schema``: the run's
    empty event table (its categories: the union over ranks, as the loader makes them);
    ``offsets``: this rank's row of the clock offsets table, ``aligned`` as applied;
    ``folder``: where its tables lie in the cache, :meth:`tag` as :meth:`named` sets it,
    once, on the client (~1-3 ms of CPU each time: the run's categories hashed)."""

    key: str
    info: RankInfo
    shift_us: float
    schema: pd.DataFrame
    offsets: pd.DataFrame
    world_size: int
    manifest: RunManifest | None
    completed_run: bool
    folder: str = ""

    def named(self) -> RankJob:
        """This job with its ``folder`` set."""
        return dataclasses.replace(self, folder=self.tag())

    def tag(self) -> str:
        """Names this rank's tables in the cache: everything they depend on."""
        cats = {c: list(map(str, self.schema[c].cat.categories)) for c in _CATEGORIES}
        ident = json.dumps(
            [
                analysis_digest(),
                self.key,
                repr(self.info),
                self.shift_us,
                cats,
                repr(self.offsets.to_dict("records")),
                self.world_size,
                self.manifest,
                self.completed_run,
            ],
            default=str,
        )
        return f"{self.key}.sum-{hashlib.sha256(ident.encode()).hexdigest()[:20]}"


def rank_events(job: RankJob, cache: RankCache) -> pd.DataFrame:
    """The rank's rows of the run's event table, as the loader and the clock alignment give
    them: shifted to the run's epoch, the run's categories, then the rank's clock offset;
    only the columns the per-rank tables read (:data:`REDUCE_COLUMNS`).

    Each column is made from the Arrow file's once: the labels' codes re-coded to the
    run's categories straight from the file's dictionary, kept as they are where the two
    agree (``to_pandas`` then ``set_categories`` built each categorical twice: 5.2 -> 3.8
    ms on a 33 MB GPU trace's rank, measured)."""
    stored = [c for c in REDUCE_COLUMNS if c != "rank"]  # the rank is not stored
    table = read_arrow(cache.events_path(job.key), stored)
    columns: dict[str, Any] = {"rank": np.full(table.num_rows, job.info.rank, dtype=np.int32)}
    for c in stored:
        chunks = table.column(c)  # (one chunk: the file holds one record batch)
        column = chunks.chunk(0) if chunks.num_chunks == 1 else chunks.combine_chunks()
        if c in ("ts_us", "end_us"):
            columns[c] = column.to_numpy(zero_copy_only=False) + job.shift_us
        elif c in _CATEGORIES:
            columns[c] = _recoded(column, job.schema[c].dtype)
        else:  # (a copy: the table's own buffers are read-only)
            columns[c] = column.to_numpy(zero_copy_only=False, writable=True)
    ev = pd.DataFrame(columns, copy=False)  # built in place: no copy to reorder the columns
    shift = offset_at(job.offsets, ev["rank"].to_numpy(), ev["ts_us"].to_numpy())
    if np.any(shift):
        ev["ts_us"] = ev["ts_us"].to_numpy() - shift
        ev["end_us"] = ev["end_us"].to_numpy() - shift
    return ev


def _recoded(column: Any, dtype: pd.CategoricalDtype) -> pd.Categorical:
    """A dictionary-encoded Arrow column as a categorical of ``dtype`` (values not among
    its categories missing, as ``set_categories`` makes them)."""
    position = dtype.categories.get_indexer(column.dictionary.to_pandas())
    indices = column.indices
    codes = (indices.fill_null(-1) if indices.null_count else indices).to_numpy(
        zero_copy_only=False, writable=True
    )
    if not np.array_equal(position, np.arange(len(position))):  # (else: the same codes)
        codes = np.append(position, -1)[codes]  # (null: -1, the last entry)
    # (every code is one of the categories' or -1: no check of each row)
    return pd.Categorical.from_codes(codes, dtype=dtype, validate=False)


def _counted(run: RunTraces) -> tuple[RunTraces, pd.Series]:
    """The run with its counted rows only, and their mask (the rows once, not in every table
    function; renumbered: rows are found by label in a range index without a hash table)."""
    counted = counted_mask(run)
    if not counted.all():
        run = dataclasses.replace(run, events=run.events[counted].reset_index(drop=True))
        counted = counted[counted].reset_index(drop=True)
    return run, counted


def rank_tables(run: RunTraces, timeline: bool = True) -> dict[str, pd.DataFrame]:
    """The per-rank part of :func:`overlapscope.analysis.api.analyze` on a one-rank run;
    ``timeline``: with the timeline rows (every drawable event: only ``--csv`` and the
    dashboard read them)."""
    run, counted = _counted(run)
    sets = lane_sets(run, counted)
    steps = step_table(run, counted, sets)
    ranks = rank_table(run, counted, steps, sets)
    exposure = comm_exposure(run, counted)
    ev = run.events
    # The rows of the collectives and of the critical path, by position, each column taken
    # once (a row selection copies every column of the table first)
    comm = take_columns(ev, ev.index.get_indexer(exposure.index), COMM_COLUMNS[:-1])
    lane = ev["lane"]
    path_codes = lane.cat.categories.get_indexer(PATH_LANES)  # (-1: a lane not in the run)
    used = any_of(lane.cat.codes.to_numpy(), [int(c) for c in path_codes if c >= 0])
    used &= ev["step"].to_numpy() >= 0
    tables = {
        "ranks": ranks,
        "steps": steps,
        "units": unit_table(run, counted, exposure, ranks),
        "comm": pd.DataFrame({**comm, "exposed_us": exposure.to_numpy()}),
        "compute": compute_by_unit(run, counted),
        "levers": lever_table(run, counted),
        "exposed": exposed_intervals(run, counted, steps, sets),
        "path": pd.DataFrame(take_columns(ev, np.flatnonzero(used), PATH_COLUMNS)),
    }
    if timeline:
        tables[TIMELINE] = timeline_table(run, counted, exposure)
    return tables


def rank_timeline(run: RunTraces) -> pd.DataFrame:
    """The timeline rows of a one-rank run, as :func:`rank_tables` gives them."""
    run, counted = _counted(run)
    return timeline_table(run, counted, comm_exposure(run, counted))


def reduce_rank(job: RankJob, cache_root: str, digest: str, timeline: bool = False) -> None:
    """Reduce one rank to its tables in ``<cache>/<job.folder>/`` (``timeline``: with its
    timeline rows), with the steps its critical-path rows cover in ``summary.pkl`` (written
    last: it marks the folder whole)."""
    _same_code(digest, analysis_digest())
    with released():
        _reduce_and_store(job, RankCache(Path(cache_root)), timeline)


def _rank_run(job: RankJob, cache: RankCache) -> RunTraces:
    return RunTraces(
        events=rank_events(job, cache),
        ranks=(job.info,),
        world_size=job.world_size,
        manifest=job.manifest,
        completed_run=job.completed_run,
        warnings=(),
        sources=(job.info.path,),
    )


def _reduce_and_store(job: RankJob, cache: RankCache, timeline: bool) -> None:
    tables = rank_tables(_rank_run(job, cache), timeline)
    assert job.folder, "a job's folder is set on the client (RankJob.named)"
    out = cache.root / job.folder
    for name in BIG_TABLES:
        if name in tables:
            write_table(out / f"{name}.arrow", tables[name])
    path_steps = sorted(int(s) for s in tables["path"]["step"].unique())
    small = {name: tables[name] for name in SMALL_TABLES}
    data = pickle.dumps({"tables": small, "path_steps": path_steps})
    atomic(out / DONE, lambda t: t.write_bytes(data))


def timeline_path(cache: RankCache, job: RankJob) -> Path:
    """Where the rank's timeline rows lie once reduced with them."""
    return cache.root / job.folder / TIMELINE_FILE


def timeline_rank(job: RankJob, cache_root: str, digest: str) -> None:
    """The timeline rows of a rank reduced without them (``--csv`` or the dashboard after a
    plain ``analyze``), beside its tables."""
    _same_code(digest, analysis_digest())
    cache = RankCache(Path(cache_root))
    with released():
        write_table(timeline_path(cache, job), rank_timeline(_rank_run(job, cache)))


def read_summary(folder: Path) -> dict[str, Any]:
    """``{"tables": {name: frame}, "path_steps": [step, ...]}`` of one reduced rank."""
    summary: dict[str, Any] = pickle.loads((folder / DONE).read_bytes())
    return summary


def cached_reduction(job: RankJob, cache: RankCache) -> tuple[str, list[int]] | None:
    """The folder and path steps of the rank's tables when the cache holds them."""
    assert job.folder, "a job's folder is set on the client (RankJob.named)"
    folder = cache.root / job.folder
    if not (folder / DONE).is_file():
        return None
    return folder.name, list(read_summary(folder)["path_steps"])


def step_entry(root: Path, token: str, step: int) -> Path:
    """Where :func:`step_path` stores the critical path of ``step`` of run ``token``."""
    return root / f"path-{token}" / f"step-{step}.pkl"


def step_path(folders: list[str], cache_root: str, token: str, step: int) -> None:
    """The critical path of ``step`` from every rank's path rows of that step, ranks in
    order (as they lie in the run's table), through the analysis' own function."""
    root = Path(cache_root)
    with released():
        parts = [read_table(root / f / "path.arrow", [("step", "==", step)]) for f in folders]
        data = pickle.dumps(critical_path(pd.concat(parts, ignore_index=True)))
        atomic(step_entry(root, token, step), lambda t: t.write_bytes(data))
