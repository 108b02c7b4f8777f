"""The tasks of an analysis, run by any executor (in this process, a local pool, Dask
workers); each reads its inputs from the cache and stores its output there, so a lost task is
run again and a finished one never twice (``pipeline/run.py`` for how they chain).

* :func:`parse_to_cache`: one rank file -> its recognised events (Arrow IPC) and a few-KB
  :class:`~overlapscope.cache.RankMeta` for the client;
* :func:`reduce_rank`: one rank's cached events -> its per-rank figures
  (``analysis/registry.py``), the same map :func:`overlapscope.analysis.api.analyze` runs;
  :func:`on_demand_rank`: the figures made only when asked for (the timeline) of a rank
  reduced without them;
* :func:`step_path`: the critical path of one step from every rank's path rows of that step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

# Imported with this module, once per worker process: the cache's Arrow files are written
# and read through these (pandas imports pyarrow.compute, which the row filters use; frames
# are converted by pandas_compat), and importing them on first use cost the first tasks of
# every worker CPU time.
import pyarrow.ipc
import pyarrow.pandas_compat

from overlapscope.analysis.clocks.alignment import offset_at
from overlapscope.analysis.collectives.matched import FROM_US, issued_starts
from overlapscope.analysis.critical_path.path import critical_path
from overlapscope.analysis.registry import PATH, RANK_FIGURES, Size, rank_tables
from overlapscope.cache import Cache, RankMeta, code_digest
from overlapscope.manifest import RunManifest
from overlapscope.phases import Lane
from overlapscope.pipeline.memory import released
from overlapscope.sealed import DamagedFile, dump, load
from overlapscope.table_files import read_arrow, read_table, write_table
from overlapscope.trace.run.loader import ParsedRank, RankInfo, RunTraces, parse_rank
from overlapscope.trace.schema import EVENT_COLUMNS

# Likewise what pandas imports on first use in the parse: its Arrow strings' version check
# (the categories of the names; ~3 ms).
with contextlib.suppress(ImportError):  # (a module of theirs, which may move)
    import pyarrow.vendored.version  # noqa: F401

# A rank's small figures and the steps of its path rows, pickled (written last: it marks the
# folder whole). Reading 7 Parquet files per rank cost the client ~30 ms per rank.
DONE = "summary.pkl"
SUMMARY_FIGURES = tuple(f.name for f in RANK_FIGURES if f.size is Size.SUMMARY)
EVENTS_FIGURES = tuple(f.name for f in RANK_FIGURES if f.size is Size.EVENTS)
ON_DEMAND_FIGURES = tuple(f.name for f in RANK_FIGURES if f.size is Size.ON_DEMAND)
CLOCK_COLUMNS = ["lane", "kind", "group", "step", "seq", "ts_us", "end_us"]
_CATEGORIES = [c for c, t in EVENT_COLUMNS.items() if t == "category"]
# The event table's columns but the one no per-rank figure reads (the category): less to read
# from the cache and to copy in every row selection (where the GPU waits reads the streams and
# the correlation ids: analysis/waiting/tables.py).
REDUCE_COLUMNS = [c for c in EVENT_COLUMNS if c != "cat"]


def figure_file(folder: Path, name: str) -> Path:
    """Where an event-sized figure of a reduced rank lies."""
    return folder / f"{name}.arrow"


@contextlib.contextmanager
def discarding(cache_root: str | Path) -> Iterator[None]:
    """A task's reads of the cache: a damaged file's entry is removed before the error goes
    on, so that the next analysis makes it again wherever the task ran (a Dask worker's
    failure reaches the client as a line only)."""
    try:
        yield
    except DamagedFile as e:
        Cache(Path(cache_root)).discard(e.path)
        raise


def _same_code(digest: str) -> None:
    if digest != code_digest():
        raise RuntimeError(
            "this worker's overlapscope differs from the client's; install the same "
            "overlapscope version on the workers"
        )


def parse_to_cache(path: str, world_hint: int, cache_root: str, key: str, digest: str) -> str:
    """Parse one trace file into the cache; returns its key. A worker whose code differs
    from the client's (``digest``) refuses."""
    _same_code(digest)
    with released():
        _parse_and_store(Path(path), world_hint, Cache(Path(cache_root)), key)
    return key


def _clock_rows(events: pd.DataFrame, comm: npt.NDArray[np.bool_]) -> pd.DataFrame:
    """The rank's rows the clocks read, with the earliest each one's data may move
    (matched.issued_starts: a folded point-to-point collective's issue)."""
    rows = events.loc[comm, CLOCK_COLUMNS].reset_index(drop=True)
    issued = issued_starts(events)
    rows[FROM_US] = rows["ts_us"] if issued is None else issued[comm]
    return rows


def _parse_and_store(path: Path, world_hint: int, cache: Cache, key: str) -> None:
    parsed = parse_rank(path, world_hint)
    if not isinstance(parsed, ParsedRank):
        cache.write(key, parsed, pd.DataFrame())
        return
    events = parsed.table.events
    comm = (events["lane"] == Lane.COMM.value) & (events["seq"] >= 0)
    comm.iloc[:1] = True  # the first row names the rank to the clock estimate
    light = dataclasses.replace(parsed.table, events=events.iloc[:0])
    meta = RankMeta(  # (the memory curve is the what-if's, which loads runs itself)
        parsed=ParsedRank(parsed.raw.without_memory(), light),
        clock_rows=_clock_rows(events, comm.to_numpy()),
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
    ``folder``: where its figures lie in the cache, :meth:`tag` as :meth:`named` sets it,
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
        """Names this rank's figures in the cache: everything they depend on."""
        cats = {c: list(map(str, self.schema[c].cat.categories)) for c in _CATEGORIES}
        ident = json.dumps(
            [
                code_digest(),
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


def rank_events(job: RankJob, cache: Cache) -> pd.DataFrame:
    """The rank's rows of the run's event table, as the loader and the clock alignment give
    them: shifted to the run's epoch, the run's categories, then the rank's clock offset;
    only the columns the per-rank figures read (:data:`REDUCE_COLUMNS`).

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


def _rank_run(job: RankJob, cache: Cache) -> RunTraces:
    return RunTraces(
        events=rank_events(job, cache),
        ranks=(job.info,),
        world_size=job.world_size,
        manifest=job.manifest,
        completed_run=job.completed_run,
        warnings=(),
        sources=(job.info.path,),
    )


def reduce_rank(job: RankJob, cache_root: str, digest: str, on_demand: bool = False) -> None:
    """Reduce one rank to its per-rank figures in ``<cache>/<job.folder>/`` (``on_demand``:
    with those made only when asked for), with the steps its critical-path rows cover in
    ``summary.pkl`` (written last: it marks the folder whole)."""
    _same_code(digest)
    with released(), discarding(cache_root):
        _reduce_and_store(job, Cache(Path(cache_root)), on_demand)


def _reduce_and_store(job: RankJob, cache: Cache, on_demand: bool) -> None:
    sizes = (Size.SUMMARY, Size.EVENTS, *((Size.ON_DEMAND,) if on_demand else ()))
    tables = rank_tables(_rank_run(job, cache), sizes)
    assert job.folder, "a job's folder is set on the client (RankJob.named)"
    out = cache.root / job.folder
    for name in (*EVENTS_FIGURES, *(ON_DEMAND_FIGURES if on_demand else ())):
        write_table(figure_file(out, name), tables[name])
    path_steps = sorted(int(s) for s in tables[PATH]["step"].unique())
    small = {name: tables[name] for name in SUMMARY_FIGURES}
    dump(out / DONE, {"tables": small, "path_steps": path_steps})


def on_demand_rank(job: RankJob, cache_root: str, digest: str) -> None:
    """The figures made only when asked for (``--csv``, the dashboard) of a rank reduced
    without them, beside its others."""
    _same_code(digest)
    cache = Cache(Path(cache_root))
    with released(), discarding(cache_root):
        tables = rank_tables(_rank_run(job, cache), (Size.ON_DEMAND,))
        for name in ON_DEMAND_FIGURES:
            write_table(figure_file(cache.root / job.folder, name), tables[name])


def read_summary(folder: Path) -> dict[str, Any]:
    """``{"tables": {name: frame}, "path_steps": [step, ...]}`` of one reduced rank."""
    summary: dict[str, Any] = load(folder / DONE)
    return summary


def cached_reduction(job: RankJob, cache: Cache) -> tuple[str, list[int]] | None:
    """The folder and path steps of the rank's figures when the cache holds them whole (a
    damaged folder is removed, with a line: made again)."""
    assert job.folder, "a job's folder is set on the client (RankJob.named)"
    folder = cache.root / job.folder
    if not (folder / DONE).is_file():
        return None
    try:
        return folder.name, list(read_summary(folder)["path_steps"])
    except DamagedFile as e:
        cache.remake(e)
        return None


def step_entry(root: Path, token: str, step: int) -> Path:
    """Where :func:`step_path` stores the critical path of ``step`` of run ``token``."""
    return root / f"path-{token}" / f"step-{step}.pkl"


def step_path(folders: list[str], cache_root: str, token: str, step: int) -> None:
    """The critical path of ``step`` from every rank's path rows of that step, ranks in
    order (as they lie in the run's table), through the analysis' own function."""
    root = Path(cache_root)
    with released(), discarding(root):
        files = [figure_file(root / f, PATH) for f in folders]
        parts = [read_table(f, [("step", "==", step)]) for f in files]
        dump(step_entry(root, token, step), critical_path(pd.concat(parts, ignore_index=True)))
