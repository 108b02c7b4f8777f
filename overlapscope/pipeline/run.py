"""Analyse trace files on any executor, through the one cache: :func:`analyse`, the one entry
point of every analysis (the CLI's, the dashboard's, the what-if's, the Perfetto export's).

Its executors: in this process (:data:`IN_PROCESS`: ``load_run`` + ``analyze``, for what
reads the run's events: ``--hta``, the what-if, the dashboard without ``--dask``), on this
machine (:class:`~overlapscope.pipeline.executor.LocalExecutor`, ``overlapscope analyze``)
and with ``--dask`` on a Dask cluster. The last two run the same rounds, each cached::

    parse    one task per rank file: decode + recognise -> events (Arrow) + meta (KB)
    client   the loader's checks on the metas (ranks, world size, warnings), the run's
             epoch and categories, the clock offsets from the collectives' ends (plan.py)
    reduce   one task per rank: its events -> its per-rank figures (analysis/registry.py)
    path     one task per step: the critical path from every rank's rows of that step
    client   the cross-rank figures, bound, findings (analysis/api.combine)

The report equals ``analyze(load_run(...))``, figure for figure: both are the registry's
per-rank map and the one combine. Whatever the cache holds starts no task: a re-analysis of
unchanged files reads each rank's figures back (a changed file is parsed and reduced again,
the others are not), and an analysis already made (same files, sizes and mtimes, same flags,
same code) is read back whole. On Dask, a worker lost mid-run has its tasks retried by the
scheduler; a rank file that still fails is an error naming every file not analysed (with
``--allow-missing-ranks``, a parse that fails is a warning each).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from overlapscope.analysis.api import RunAnalysis, analyze, combine
from overlapscope.analysis.clocks.alignment import Clocks
from overlapscope.analysis.critical_path.path import CriticalPath, join_paths
from overlapscope.analysis.findings.registry import registry_digest as findings_digest
from overlapscope.analysis.registry import Size, rank_tables
from overlapscope.cache import (
    CACHE_ENV,
    Cache,
    code_digest,
    default_cache_dir,
    healing,
    read_entry,
    write_entry,
)
from overlapscope.errors import UserError
from overlapscope.pipeline.executor import Executor, LocalExecutor
from overlapscope.pipeline.plan import Inputs, lost, plan
from overlapscope.pipeline.tasks import (
    DONE,
    ON_DEMAND_FIGURES,
    SUMMARY_FIGURES,
    RankJob,
    cached_reduction,
    figure_file,
    on_demand_rank,
    read_summary,
    reduce_rank,
    step_entry,
    step_path,
)
from overlapscope.sealed import load
from overlapscope.table_files import read_table
from overlapscope.trace.run.loader import RankInfo, RunTraces, load_run

# Above this many events in all, a round of reductions runs on a pool of worker processes.
PARALLEL_MIN_EVENTS = 500_000


@dataclass(frozen=True, slots=True)
class Target:
    """Where the tasks run (``dask``: a scheduler's address, or ``local`` for a local Dask
    cluster; None: on this machine, :class:`LocalExecutor`) and the cache (``cache_dir``;
    None: the default, :func:`~overlapscope.cache.default_cache_dir`; ``no_cache``: a
    temporary one, gone when the analysis is)."""

    dask: str | None = None
    cache_dir: Path | None = None
    no_cache: bool = False
    in_process: bool = False  # load_run + analyze here: no task, no per-rank cache

    def __post_init__(self) -> None:
        if self.in_process and self.dask is not None:
            raise ValueError("Target: in_process runs here, dask on a cluster; set one of them")

    def executor(self) -> contextlib.AbstractContextManager[Executor]:
        if self.dask is None:
            return LocalExecutor()
        from overlapscope.cluster.client import DaskExecutor  # (Dask only when asked for)

        return DaskExecutor(self.dask)


# The in-process executor: the run loaded and analysed in this process.
IN_PROCESS = Target(in_process=True)


@contextlib.contextmanager
def opened(target: Target) -> Iterator[Cache]:
    """The target's cache, ready; a default one that cannot be written is replaced by a
    temporary one with a line saying so (``--cache DIR`` given must work)."""
    if target.no_cache:
        with tempfile.TemporaryDirectory(prefix="overlapscope-cache-") as tmp:
            yield Cache(Path(tmp))
        return
    cache = Cache(target.cache_dir if target.cache_dir is not None else default_cache_dir())
    try:
        cache.prepare()
    except UserError as e:
        if target.cache_dir is not None or target.dask is not None:
            raise
        print(f"warning: {e}; analysed without it (set {CACHE_ENV})", file=sys.stderr)
        with opened(Target(no_cache=True)) as tmp_cache:
            yield tmp_cache
        return
    yield cache


@dataclass(frozen=True, slots=True)
class StoredAnalysis:
    """An analysis and where each rank's figures lie in the cache: ``folders[i]`` (under
    the cache root) holds those of rank ``ranks[i]``, its on-demand ones (``timeline.arrow``,
    every drawable event, read a step at a time) among them when asked for."""

    analysis: RunAnalysis
    ranks: tuple[int, ...]
    folders: tuple[str, ...]
    infos: tuple[RankInfo, ...] = ()  # each rank's file and clock (its part of --perfetto)
    # the run loaded, its events too: the in-process executor's only (never cached)
    run: RunTraces | None = None


def analyse(
    inputs: Inputs,
    target: Target | None = None,
    cache: Cache | None = None,
    *,
    timeline: bool = False,
    timeline_files: bool = False,
    hta: bool = False,
) -> StoredAnalysis:
    """The one entry point of every analysis (``analyze``, ``diagnose``, the dashboard,
    ``--hta``, the what-if's calibration, the Perfetto export, the Python API): ``inputs``
    analysed on ``target``'s executor through ``cache`` (None: the target's, opened for this
    call). ``analyze(load_run(inputs.paths), align_clocks=...)`` figure for figure.

    ``target.in_process`` (or ``hta``, which reads the whole traces): the run loaded here and
    analysed by :func:`~overlapscope.analysis.api.analyze` (the in-process executor: no task,
    no per-rank cache); the result keeps the loaded run (``StoredAnalysis.run``) for those
    that read its events. Else the per-rank work in tasks, every round cached under
    :func:`analysis_key`. ``timeline``: gather every rank's timeline rows (only ``--csv``
    writes them; else the analysis' timeline is empty); ``timeline_files``: every rank's
    on-demand figures in its folder (the dashboard reads the timeline a step at a time). A
    damaged cache file met on the way is made again (:func:`~overlapscope.cache.healing`)."""
    target = target or Target()
    if hta and target.dask is not None:
        raise UserError("--hta runs HTA on the whole traces locally; leave it out with --dask")
    if hta or target.in_process:
        return _in_process(inputs, hta)
    if cache is None:
        with opened(target) as own:
            return analyse(inputs, target, own, timeline=timeline, timeline_files=timeline_files)
    return healing(cache, lambda: _stored(inputs, target, cache, timeline, timeline_files))


def _in_process(inputs: Inputs, hta: bool) -> StoredAnalysis:
    """The in-process executor: ``load_run`` + ``analyze`` in this process, the run kept."""
    run = load_run(
        list(inputs.paths),
        progress=inputs.progress,
        allow_missing_ranks=inputs.allow_missing_ranks,
        rank_from_names=inputs.rank_from_names,
    )
    analysis = analyze(run, hta=hta, align_clocks=inputs.align_clocks)
    ranks = tuple(i.rank for i in run.ranks)
    return StoredAnalysis(analysis, ranks, (), run.ranks, run)


def _stored(
    inputs: Inputs, target: Target, cache: Cache, timeline: bool, timeline_files: bool
) -> StoredAnalysis:
    on_demand = timeline_files or timeline
    entry = cache.entry("result", analysis_key(inputs, timeline=timeline, on_demand=on_demand))
    if (hit := read_entry(entry)) is not None:
        done: StoredAnalysis = hit
        return done
    with target.executor() as executor:
        run, clocks, jobs = plan(inputs, executor, cache)
        reduced = _reduce(executor, cache, jobs, on_demand)
        path = _path(executor, cache, reduced)
    folders = [f for f, _ in reduced]
    result = _combined(run, cache.root, folders, clocks, path, timeline)
    ranks = tuple(int(j.info.rank) for j in jobs)
    done = StoredAnalysis(result, ranks, tuple(folders), tuple(j.info for j in jobs))
    write_entry(entry, done)
    return done


def analysis_key(inputs: Inputs, *, timeline: bool, on_demand: bool) -> str:
    """The one key of a whole analysis in the cache (the pipeline's ``result`` entry, the
    dashboard's): the code and the findings registered, the flags (``inputs``' and what is
    gathered), each path given (a directory or a file; as given too: the report names the
    files so), and the name, size and mtime of every file given and of every entry of a
    directory given (its traces, run.json, a ``*.partial`` marker, another tool's file the
    loader skips)."""
    flags = (inputs.allow_missing_ranks, inputs.rank_from_names, inputs.align_clocks)
    return _paths_key(inputs.paths, (*flags, timeline, on_demand))


def _paths_key(paths: Sequence[Path], flags: tuple[object, ...]) -> str:
    h = hashlib.sha256(f"{code_digest()}|{findings_digest()}|{flags}".encode())
    for p in paths:
        is_dir = Path(p).is_dir()
        h.update(f"\0{p}\0{Path(p).resolve()}|{is_dir}".encode())
        entries = sorted(Path(p).iterdir()) if is_dir else [Path(p)]
        for e in entries:
            try:
                st = e.stat()
            except OSError:
                h.update(f"{e.resolve()}|missing".encode())
                continue
            h.update(f"{e.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:24]


def _reduce(
    executor: Executor, cache: Cache, jobs: list[RankJob], on_demand: bool
) -> list[tuple[str, list[int]]]:
    """Every rank's figures (their folder and path steps): cached, or from a reduce task;
    ``on_demand``: with every rank's on-demand figures (a task each for ranks reduced
    without)."""
    todo = [j for j in jobs if cached_reduction(j, cache) is None]
    if todo:
        args: list[tuple[Any, ...]] = [(j, str(cache.root), code_digest(), on_demand) for j in todo]
        stored = lambda tag: (cache.root / tag / DONE).is_file()  # noqa: E731
        _run_ranks(executor, reduce_rank, todo, args, stored)
    lacking = [j for j in jobs if on_demand and not _has_on_demand(cache, j.folder)]
    if lacking:
        args = [(j, str(cache.root), code_digest()) for j in lacking]
        _run_ranks(executor, on_demand_rank, lacking, args, lambda f: _has_on_demand(cache, f))
    out = [cached_reduction(j, cache) for j in jobs]
    return [r for r in out if r is not None]


def _has_on_demand(cache: Cache, folder: str) -> bool:
    return all(figure_file(cache.root / folder, n).is_file() for n in ON_DEMAND_FIGURES)


def _run_ranks(
    executor: Executor,
    fn: Callable[..., None],
    jobs: list[RankJob],
    args: list[tuple[Any, ...]],
    stored: Callable[[str], bool],
) -> None:
    """``fn(*a)`` per rank, each task named by its job's folder; an error naming the rank
    files whose task failed."""
    names = [j.folder for j in jobs]
    heavy = sum(j.info.num_events for j in jobs) >= PARALLEL_MIN_EVENTS
    failed = executor.run(fn, args, names, stored, heavy=heavy)
    if failed:
        paths = [j.info.path for j in jobs]
        raise UserError(
            f"{lost(paths, names, failed, executor.where)}; run again (analysed ranks are cached)"
        )


def _path(executor: Executor, cache: Cache, reduced: list[tuple[str, list[int]]]) -> CriticalPath:
    """The run's critical path, one task per step (cached per run: per its ranks' figures)."""
    folders = [f for f, _ in reduced]
    token = hashlib.sha256("|".join(folders).encode()).hexdigest()[:24]
    entry = cache.entry("path", token)
    if not entry.is_file():
        steps = sorted({s for _, ss in reduced for s in ss})
        todo = [s for s in steps if not step_entry(cache.root, token, s).is_file()]
        if todo:
            args = [(folders, str(cache.root), token, s) for s in todo]
            names = [f"{token}-{s}" for s in todo]
            stored = lambda n: step_entry(cache.root, token, int(n.rsplit("-", 1)[1])).is_file()  # noqa: E731
            failed = executor.run(step_path, args, names, stored)
            if failed:
                raise UserError(
                    f"critical path of {len(failed)} steps not computed {executor.where} "
                    f"({next(iter(failed.values()))}); run again (the ranks' figures are cached)"
                )
        parts = [load(step_entry(cache.root, token, s)) for s in steps]
        write_entry(entry, join_paths(parts))
    path: CriticalPath = load(entry)
    return path


def _combined(
    run: RunTraces,
    root: Path,
    folders: Sequence[str],
    clocks: Clocks,
    path: CriticalPath,
    on_demand: bool,
) -> RunAnalysis:
    """The combine from the per-rank figures in ``root/<folder>`` (one folder per rank of
    ``run.ranks``, in order), never an event; ``on_demand=False``: those figures empty
    (they hold every drawable event; only ``--csv`` writes them)."""
    parts: dict[str, list[pd.DataFrame]] = {n: [] for n in SUMMARY_FIGURES}
    for f in folders:
        tables = read_summary(root / f)["tables"]
        for n in SUMMARY_FIGURES:
            parts[n].append(tables[n])
    per_rank = {n: pd.concat(frames, ignore_index=True) for n, frames in parts.items()}
    if on_demand:
        for n in ON_DEMAND_FIGURES:
            frames = [read_table(figure_file(root / f, n)) for f in folders]
            per_rank[n] = pd.concat(frames, ignore_index=True)
    else:
        per_rank.update(empty_on_demand(run))
    return combine(run, per_rank, clocks, path)


def empty_on_demand(run: RunTraces) -> dict[str, pd.DataFrame]:
    """The on-demand figures' columns and dtypes, no rows, from the run's event columns
    (``run.events``: none of its rows are read)."""
    return rank_tables(dataclasses.replace(run, events=run.events.iloc[:0]), (Size.ON_DEMAND,))
