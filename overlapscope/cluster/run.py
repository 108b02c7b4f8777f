"""Analyse a run on a Dask cluster: :func:`analyze_on_dask` (``--dask``).

Three rounds of tasks, each cached, so the client never holds an event::

    parse    one task per rank file: decode + recognise -> events (Arrow) + meta (KB)
    client   the loader's checks on the metas (ranks, world size, warnings), the run's
             epoch and categories, the clock offsets from the collectives' ends
    reduce   one task per rank: its events -> its tables (steps, units, collectives ...)
    path     one task per step: the critical path from every rank's rows of that step
    client   collectives matched across ranks, bound, findings (cluster/combine.py)

The report equals ``analyze(load_run(...))``, figure for figure. Whatever the cache holds
starts no task; a run wholly in the cache needs no cluster, and an analysis already made
(same files, sizes and mtimes, same flags, same code) is read back whole. A worker lost mid-run has its
tasks retried by the scheduler; a rank file that still fails is an error naming every file
not analysed (with ``--allow-missing-ranks``, a parse that fails is a warning each).
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from overlapscope.analysis.api import RunAnalysis
from overlapscope.analysis.clocks import align_run, shared_host
from overlapscope.analysis.critical_path import CriticalPath
from overlapscope.cluster.cache import (
    RankCache,
    RankMeta,
    analysis_digest,
    atomic,
    default_cache_dir,
    entry_key,
    parser_digest,
)
from overlapscope.cluster.client import LazyClient, run_tasks
from overlapscope.cluster.combine import Clocks, combine, join_paths
from overlapscope.cluster.tasks import (
    DONE,
    RankJob,
    cached_reduction,
    parse_to_cache,
    reduce_rank,
    step_entry,
    step_path,
    timeline_path,
    timeline_rank,
)
from overlapscope.errors import UserError
from overlapscope.trace.loader import (
    ALLOW_FLAG,
    ParseFiles,
    RankInfo,
    RunTraces,
    _Parsed,
    load_run,
)
from overlapscope.trace.parse import TraceFileError

__all__ = ["DaskAnalysis", "DaskTarget", "analyze_on_dask", "analyze_with_tables", "parse_to_cache"]
# (key, meta) of each parsed file, by its path as the loader names it.
Metas = dict[str, tuple[str, RankMeta]]


def _lost(files: Sequence[Path], keys: Sequence[str], failed: dict[str, str]) -> str:
    lost = [str(f) for f, k in zip(files, keys, strict=True) if k in failed]
    reason = failed[next(k for k in keys if k in failed)]
    return f"{len(lost)} rank files not analysed on the Dask cluster ({reason}): {', '.join(lost)}"


def parse_hook(client: LazyClient, cache: RankCache, strict: bool, metas: Metas) -> ParseFiles:
    """The loader's ``parse_files``: cached metas, the rest parsed in tasks. The loader sees
    each file without its events; its meta is kept in ``metas``."""

    def parse(
        files: list[Path], world_hint: int, _progress: bool | None
    ) -> list[_Parsed | TraceFileError]:
        keys = [entry_key(f, world_hint) for f in files]
        todo = [(f, k) for f, k in zip(files, keys, strict=True) if not cache.has(k)]
        failed: dict[str, str] = {}
        if todo:
            args = [
                (str(f.resolve()), world_hint, str(cache.root), k, parser_digest()) for f, k in todo
            ]
            names = [k for _, k in todo]
            failed = run_tasks(client.get(), parse_to_cache, args, names, cache.has)
        if failed and strict:
            raise UserError(
                f"{_lost(files, keys, failed)}; run again (analysed ranks are cached), "
                f"or pass {ALLOW_FLAG} to analyse the rest"
            )
        out: list[_Parsed | TraceFileError] = []
        for f, k in zip(files, keys, strict=True):
            if k in failed:
                out.append(TraceFileError(f, f"not analysed on the Dask cluster ({failed[k]})"))
                continue
            res = cache.read(k, f)
            if isinstance(res, RankMeta):
                metas[str(f)] = (k, res)
                out.append(res.parsed)
            else:
                out.append(res)
        return out

    return parse


def _fill_infos(run: RunTraces, metas: Metas) -> RunTraces:
    """The loader's rank infos with the figures of the whole tables (it saw none)."""
    infos = tuple(
        dataclasses.replace(
            i, num_events=metas[str(i.path)][1].num_events, has_gpu=metas[str(i.path)][1].has_gpu
        )
        for i in run.ranks
    )
    return dataclasses.replace(run, ranks=infos)


def _clocks(
    run: RunTraces, metas: Metas, shifts: dict[int, float], enabled: bool
) -> tuple[RunTraces, Clocks]:
    """The clock offsets as ``analyze`` estimates them, from the collectives' ends only."""
    frames = []
    for info in run.ranks:
        rows = metas[str(info.path)][1].clock_rows
        frames.append(
            rows.assign(
                rank=pd.Series(info.rank, index=rows.index, dtype="int32"),
                ts_us=rows["ts_us"] + shifts[info.rank],
                end_us=rows["end_us"] + shifts[info.rank],
            )
        )
    clock_run = dataclasses.replace(run, events=pd.concat(frames, ignore_index=True))
    aligned, offsets = align_run(clock_run, enabled)
    run = dataclasses.replace(run, warnings=aligned.warnings)
    return run, Clocks(offsets, enabled, shared_host(run.manifest))


def _shifts(run: RunTraces, metas: Metas) -> dict[int, float]:
    """Each rank's shift to the run's epoch, as the loader computes it."""
    origin = {i.rank: metas[str(i.path)][1].parsed.raw.origin_ns for i in run.ranks}
    epoch = min(origin.values())
    return {r: (o - epoch) / 1000.0 for r, o in origin.items()}


def _jobs(run: RunTraces, metas: Metas, shifts: dict[int, float], clocks: Clocks) -> list[RankJob]:
    jobs = []
    for info in run.ranks:
        row = clocks.offsets[clocks.offsets["rank"] == info.rank].reset_index(drop=True)
        if not clocks.applied:
            row = row.assign(aligned=False)
        key = metas[str(info.path)][0]
        common = (run.events, row, run.world_size, run.manifest, run.completed_run)
        jobs.append(RankJob(key, info, shifts[info.rank], *common).named())
    return jobs


def _reduce(
    client: LazyClient, cache: RankCache, jobs: list[RankJob], timeline: bool
) -> list[tuple[str, list[int]]]:
    """Every rank's tables (their folder and path steps): cached, or from a reduce task;
    ``timeline``: with every rank's timeline rows (a task each for ranks reduced without)."""
    todo = [j for j in jobs if cached_reduction(j, cache) is None]
    if todo:
        args: list[tuple[Any, ...]] = [
            (j, str(cache.root), analysis_digest(), timeline) for j in todo
        ]
        stored = lambda tag: (cache.root / tag / DONE).is_file()  # noqa: E731
        _run_ranks(client, reduce_rank, todo, args, stored)
    lacking = [j for j in jobs if timeline and not timeline_path(cache, j).is_file()]
    if lacking:
        args = [(j, str(cache.root), analysis_digest()) for j in lacking]  # (no timeline flag)
        by_folder = {j.folder: j for j in lacking}
        stored = lambda folder: timeline_path(cache, by_folder[folder]).is_file()  # noqa: E731
        _run_ranks(client, timeline_rank, lacking, args, stored)
    out = [cached_reduction(j, cache) for j in jobs]
    return [r for r in out if r is not None]


def _run_ranks(
    client: LazyClient,
    fn: Callable[..., None],
    jobs: list[RankJob],
    args: list[tuple[Any, ...]],
    stored: Callable[[str], bool],
) -> None:
    """``fn(*a)`` per rank, each task named by its job's folder; an error naming the rank
    files whose task failed."""
    names = [j.folder for j in jobs]
    failed = run_tasks(client.get(), fn, args, names, stored)
    if failed:
        paths = [j.info.path for j in jobs]
        raise UserError(f"{_lost(paths, names, failed)}; run again (analysed ranks are cached)")


def _path(
    client: LazyClient, cache: RankCache, reduced: list[tuple[str, list[int]]]
) -> CriticalPath:
    """The run's critical path, one task per step (cached per run: per its ranks' tables)."""
    folders = [f for f, _ in reduced]
    token = hashlib.sha256("|".join(folders).encode()).hexdigest()[:24]
    entry = cache.root / f"path-{token}.pkl"
    if not entry.is_file():
        steps = sorted({s for _, ss in reduced for s in ss})
        todo = [s for s in steps if not step_entry(cache.root, token, s).is_file()]
        if todo:
            args = [(folders, str(cache.root), token, s) for s in todo]
            names = [f"{token}-{s}" for s in todo]
            stored = lambda n: step_entry(cache.root, token, int(n.rsplit("-", 1)[1])).is_file()  # noqa: E731
            failed = run_tasks(client.get(), step_path, args, names, stored)
            if failed:
                raise UserError(
                    f"critical path of {len(failed)} steps not computed on the Dask cluster "
                    f"({next(iter(failed.values()))}); run again (the ranks' tables are cached)"
                )
        parts = [pickle.loads(step_entry(cache.root, token, s).read_bytes()) for s in steps]
        data = pickle.dumps(join_paths(parts))
        atomic(entry, lambda t: t.write_bytes(data))
    path: CriticalPath = pickle.loads(entry.read_bytes())
    return path


@dataclass(frozen=True, slots=True)
class DaskTarget:
    """Where ``--dask`` runs its tasks (a scheduler's address, or ``local``) and ``--cache``
    (None: the default cache)."""

    address: str
    cache_dir: Path | None = None

    def cache(self) -> RankCache:
        return RankCache(self.cache_dir if self.cache_dir is not None else default_cache_dir())


@dataclass(frozen=True, slots=True)
class DaskAnalysis:
    """An analysis made on Dask, and where each rank's tables lie in the cache:
    ``folders[i]`` (under the cache root) holds the tables of rank ``ranks[i]``, its
    ``timeline.arrow`` among them when asked for (every drawable event, read a step at a
    time)."""

    analysis: RunAnalysis
    ranks: tuple[int, ...]
    folders: tuple[str, ...]
    infos: tuple[RankInfo, ...] = ()  # each rank's file and clock (its part of --perfetto)


def analyze_on_dask(
    paths: Sequence[Path],
    address: str,
    *,
    cache_dir: Path | None = None,
    allow_missing_ranks: bool = False,
    rank_from_names: bool = False,
    align_clocks: bool = True,
    timeline: bool = False,
) -> RunAnalysis:
    """``analyze(load_run(paths), align_clocks=...)`` with the per-rank work in Dask tasks
    on ``address`` (a scheduler, or ``local``) and the summaries cached in ``cache_dir``.
    ``timeline``: gather every rank's timeline rows (only ``--csv`` writes them)."""
    flags = (allow_missing_ranks, rank_from_names, align_clocks, timeline)
    done = analyze_with_tables(paths, DaskTarget(address, cache_dir), flags, timeline)
    return done.analysis


def analyze_with_tables(
    paths: Sequence[Path],
    target: DaskTarget,
    flags: tuple[bool, bool, bool, bool],
    timeline_files: bool = True,
) -> DaskAnalysis:
    """:func:`analyze_on_dask` with where each rank's tables lie; ``flags``:
    (allow_missing_ranks, rank_from_names, align_clocks, timeline); ``timeline_files``:
    every rank's timeline rows in its folder (the dashboard reads them a step at a time;
    ``timeline`` gathers them into the analysis as well)."""
    allow_missing_ranks, rank_from_names, align_clocks, timeline = flags
    timeline_files = timeline_files or timeline
    cache = target.cache()
    cache.prepare()
    entry = cache.root / f"result-{result_token(paths, (*flags, timeline_files))}.pkl"
    if entry.is_file():
        cached: DaskAnalysis = pickle.loads(entry.read_bytes())
        return cached
    with LazyClient(target.address) as client:
        run, clocks, jobs = plan(
            paths, client, cache, allow_missing_ranks, rank_from_names, align_clocks
        )
        reduced = _reduce(client, cache, jobs, timeline_files)
        path = _path(client, cache, reduced)
    folders = [f for f, _ in reduced]
    result = combine(run, cache.root, folders, clocks, path, timeline=timeline)
    ranks = tuple(int(j.info.rank) for j in jobs)
    done = DaskAnalysis(result, ranks, tuple(folders), tuple(j.info for j in jobs))
    data = pickle.dumps(done)
    atomic(entry, lambda t: t.write_bytes(data))
    return done


def result_token(paths: Sequence[Path], flags: tuple[object, ...]) -> str:
    """Names a whole analysis in the cache: the analysis code, the flags, each path given
    (a directory or a file), and the name, size and mtime of every file given and of every
    entry of a directory given (its traces, run.json, a ``*.partial`` marker, another
    tool's file the loader skips)."""
    h = hashlib.sha256(f"{analysis_digest()}|{flags}".encode())
    for p in paths:
        is_dir = Path(p).is_dir()
        h.update(f"\0{Path(p).resolve()}|{is_dir}".encode())
        entries = sorted(Path(p).iterdir()) if is_dir else [Path(p)]
        for e in entries:
            try:
                st = e.stat()
            except OSError:
                h.update(f"{e.resolve()}|missing".encode())
                continue
            h.update(f"{e.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:24]


def plan(
    paths: Sequence[Path],
    client: LazyClient,
    cache: RankCache,
    allow_missing_ranks: bool = False,
    rank_from_names: bool = False,
    align_clocks: bool = True,
) -> tuple[RunTraces, Clocks, list[RankJob]]:
    """Parse (tasks for what the cache lacks) and load the run without events: the loaded
    run (its warnings those of ``analyze``), the clock estimate, and one job per rank."""
    metas: Metas = {}
    run = load_run(
        list(paths),
        allow_missing_ranks=allow_missing_ranks,
        rank_from_names=rank_from_names,
        parse_files=parse_hook(client, cache, not allow_missing_ranks, metas),
    )
    run = _fill_infos(run, metas)
    shifts = _shifts(run, metas)
    run, clocks = _clocks(run, metas, shifts, align_clocks)
    return run, clocks, _jobs(run, metas, shifts, clocks)
