"""The client's share before the per-rank reductions: the trace files parsed (tasks for what
the cache lacks) and loaded without their events, the clock offsets estimated from the
collectives' ends, and one :class:`~overlapscope.pipeline.tasks.RankJob` per rank."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from overlapscope.analysis.clocks.alignment import Clocks, estimate_clocks
from overlapscope.cache import Cache, RankMeta, code_digest, entry_key
from overlapscope.errors import UserError
from overlapscope.pipeline.executor import Executor
from overlapscope.pipeline.tasks import RankJob, parse_to_cache
from overlapscope.pool import PARALLEL_MIN_BYTES, show_progress
from overlapscope.sealed import DamagedFile
from overlapscope.trace.read.parse import TraceFileError
from overlapscope.trace.run.loader import (
    ALLOW_FLAG,
    ParsedRank,
    ParseFiles,
    RunTraces,
    epoch_shifts,
    load_run,
)

# (key, meta) of each parsed file, by its path as the loader names it.
Metas = dict[str, tuple[str, RankMeta]]


def lost(files: Sequence[Path], keys: Sequence[str], failed: dict[str, str], where: str) -> str:
    """One line naming every file whose task failed, and the first reason."""
    gone = [str(f) for f, k in zip(files, keys, strict=True) if k in failed]
    reason = failed[next(k for k in keys if k in failed)]
    return f"{len(gone)} rank files not analysed {where} ({reason}): {', '.join(gone)}"


def parse_hook(executor: Executor, cache: Cache, strict: bool, metas: Metas) -> ParseFiles:
    """The loader's ``parse_files``: cached metas, the rest parsed in tasks. The loader sees
    each file without its events; its meta is kept in ``metas``."""

    def parse(
        files: list[Path], world_hint: int, progress: bool | None
    ) -> list[ParsedRank | TraceFileError]:
        keys = [entry_key(f, world_hint) for f in files]
        cached = {k: _cached(cache, k, f) for f, k in zip(files, keys, strict=True)}
        read = {k: res for k, res in cached.items() if res is not None}
        todo = [(f, k) for f, k in zip(files, keys, strict=True) if k not in read]
        failed: dict[str, str] = {}
        if todo:
            args = [(str(f.resolve()), world_hint, str(cache.root), k, code_digest()) for f, k in todo]  # fmt: skip
            total = sum(f.stat().st_size for f, _ in todo)
            label = "parsing traces" if show_progress(progress, total) else None
            names = [k for _, k in todo]
            heavy = total >= PARALLEL_MIN_BYTES
            failed = executor.run(parse_to_cache, args, names, cache.has, heavy=heavy, progress=label)  # fmt: skip
        if failed and strict:
            raise UserError(
                f"{lost(files, keys, failed, executor.where)}; run again (analysed ranks are "
                f"cached), or pass {ALLOW_FLAG} to analyse the rest"
            )
        out: list[ParsedRank | TraceFileError] = []
        for f, k in zip(files, keys, strict=True):
            if k in failed:
                out.append(TraceFileError(f, f"not analysed {executor.where} ({failed[k]})"))
                continue
            res = read[k] if k in read else cache.read(k, f)
            if isinstance(res, RankMeta):
                metas[str(f)] = (k, res)
                out.append(res.parsed)
            else:
                out.append(res)
        return out

    return parse


def _cached(cache: Cache, key: str, path: Path) -> RankMeta | TraceFileError | None:
    """The cached parse of ``path``, or None: not cached, or damaged (then removed, with a
    line: parsed again)."""
    if not cache.has(key):
        return None
    try:
        return cache.read(key, path)
    except DamagedFile as e:
        cache.remake(e)
        return None


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
    """The one clock estimate (:func:`~overlapscope.analysis.clocks.alignment.estimate_clocks`) over
    the collectives' rows only, each shifted onto the run's clock as the loader shifts it."""
    frames = []
    for info in run.ranks:
        rows = metas[str(info.path)][1].clock_rows
        frames.append(
            rows.assign(
                rank=pd.Series(info.rank, index=rows.index, dtype="int32"),
                ts_us=rows["ts_us"] + shifts[info.rank],
                end_us=rows["end_us"] + shifts[info.rank],
                from_us=rows["from_us"] + shifts[info.rank],
            )
        )
    clock_run = dataclasses.replace(run, events=pd.concat(frames, ignore_index=True))
    aligned, clocks = estimate_clocks(clock_run, enabled)
    return dataclasses.replace(run, warnings=aligned.warnings), clocks


def _shifts(run: RunTraces, metas: Metas) -> dict[int, float]:
    """Each rank's shift onto the run's clock: the loader's (:func:`epoch_shifts`)."""
    return epoch_shifts({i.rank: metas[str(i.path)][1].parsed.raw.origin_ns for i in run.ranks})


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


@dataclasses.dataclass(frozen=True, slots=True)
class Inputs:
    """What to analyse and how: the run's paths and the loader's and the clocks' flags."""

    paths: tuple[Path, ...]
    allow_missing_ranks: bool = False
    rank_from_names: bool = False
    align_clocks: bool = True
    progress: bool | None = None


def plan(
    inputs: Inputs, executor: Executor, cache: Cache
) -> tuple[RunTraces, Clocks, list[RankJob]]:
    """Parse (tasks for what the cache lacks) and load the run without events: the loaded
    run (its warnings those of ``analyze``), the clock estimate, and one job per rank."""
    metas: Metas = {}
    run = load_run(
        list(inputs.paths),
        progress=inputs.progress,
        allow_missing_ranks=inputs.allow_missing_ranks,
        rank_from_names=inputs.rank_from_names,
        parse_files=parse_hook(executor, cache, not inputs.allow_missing_ranks, metas),
    )
    run = _fill_infos(run, metas)
    shifts = _shifts(run, metas)
    run, clocks = _clocks(run, metas, shifts, inputs.align_clocks)
    return run, clocks, _jobs(run, metas, shifts, clocks)
