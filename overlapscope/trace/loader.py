"""Load a run (a directory of per-rank traces, or trace files) into one event table.

:func:`load_run` is the single entry point. Files are decoded and recognised in parallel
worker processes (one per file, up to the CPU count) when the set is large; the rank of each
file comes from its ``distributedInfo``. Problems with single files become warnings when
other files can still be analysed, and a :class:`~overlapscope.errors.UserError` when nothing
can.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from overlapscope.errors import UserError
from overlapscope.trace.parse import NotATraceError, RawTrace, TraceFileError, read_trace
from overlapscope.trace.recognize import ComputeSource, RankTable, recognize
from overlapscope.trace.schema import EVENT_COLUMNS, Framework

RUN_META = "run.json"
TRACE_SUFFIXES = (".json", ".json.gz")
# Below this many bytes in total, parsing in-process beats starting workers.
PARALLEL_MIN_BYTES = 16 * 1024 * 1024
PROGRESS_MIN_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RankInfo:
    rank: int
    path: Path
    world_size: int | None
    backend: str | None
    framework: Framework
    compute_source: ComputeSource
    steps: tuple[int, ...]
    num_events: int
    has_gpu: bool
    base_time_ns: int | None


@dataclass(frozen=True, slots=True)
class RunTraces:
    """A loaded run: the event table (see :mod:`overlapscope.trace.schema`) and its context."""

    events: pd.DataFrame
    ranks: tuple[RankInfo, ...]
    world_size: int
    run_meta: dict[str, Any] | None  # run.json of an overlapscope run
    completed_run: bool  # an overlapscope run directory with run.json and no *.partial
    warnings: tuple[str, ...]
    sources: tuple[Path, ...]

    @property
    def has_gpu(self) -> bool:
        return any(r.has_gpu for r in self.ranks)

    def rank_info(self, rank: int) -> RankInfo:
        for r in self.ranks:
            if r.rank == rank:
                return r
        raise KeyError(f"rank {rank} not loaded; loaded: {[r.rank for r in self.ranks]}")


# JSON files an overlapscope run or sweep writes beside its traces.
NOT_TRACES = frozenset({RUN_META, "config.json", "summary.json"})
ALLOW_FLAG = "--allow-missing-ranks"


def _is_trace_name(p: Path) -> bool:
    return p.name not in NOT_TRACES and p.name.endswith(TRACE_SUFFIXES)


def _listed_traces(d: Path, strict: bool, warnings: list[str]) -> list[Path] | None:
    """The trace files an overlapscope run.json lists (None: no readable list).

    A listed file that is missing is a missing rank: an error, or with ``strict=False`` a
    warning and the rest.
    """
    try:
        meta = json.loads((d / RUN_META).read_text())
    except (OSError, ValueError):
        return None
    names = meta.get("traces") if isinstance(meta, dict) else None
    if not isinstance(names, list) or not names:
        return None
    listed = [d / str(n) for n in names]
    absent = [p for p in listed if not p.is_file()]
    if absent and strict:
        raise UserError(
            f"{absent[0]}: missing (run.json lists it); copy the run again, or pass "
            f"{ALLOW_FLAG} to analyse the {len(listed) - len(absent)} ranks present"
        )
    warnings.extend(f"{p}: missing (run.json lists it)" for p in absent)
    return [p for p in listed if p.is_file()]


def find_trace_files(
    paths: Sequence[Path], *, strict: bool = True, warnings: list[str] | None = None
) -> tuple[list[Path], list[Path]]:
    """Expand directories into their trace files (those run.json lists, else every
    ``*.json`` / ``*.json.gz`` an overlapscope run does not write itself); returns
    (files, run directories). Traces of more than one run directory are refused."""
    warn: list[str] = [] if warnings is None else warnings
    files: list[Path] = []
    dirs: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = _listed_traces(p, strict, warn)
            if found is None:
                found = sorted(q for q in p.iterdir() if q.is_file() and _is_trace_name(q))
            if not found:
                raise UserError(
                    f"{p}: no trace files (*.json, *.json.gz) in this directory; "
                    "pass a run directory written by 'overlapscope run' or the trace files"
                )
            files.extend(found)
            dirs.append(p)
        elif p.is_file():
            files.append(p)
        else:
            raise UserError(f"{p}: no such file or directory")
    runs = sorted({str(d) for d in dirs} | {str(f.parent) for f in files if _is_run_dir(f.parent)})
    if len({str(Path(r).resolve()) for r in runs}) > 1:
        raise UserError(
            f"traces of different runs ({runs[0]} and {runs[1]}); analyse one run at a time"
        )
    return files, dirs


def _is_run_dir(d: Path) -> bool:
    return (d / RUN_META).is_file()


@dataclass(frozen=True, slots=True)
class _Parsed:
    raw: RawTrace
    table: RankTable


def _parse_one(path: Path, world_hint: int) -> _Parsed | TraceFileError:
    try:
        raw = read_trace(path)
    except TraceFileError as e:
        return e
    world = raw.world_size or world_hint
    table = recognize(raw, world)
    # The recognised table replaces the raw columns; keep only what the loader needs.
    light = RawTrace(
        path=raw.path,
        rank=raw.rank,
        world_size=raw.world_size,
        backend=raw.backend,
        base_time_ns=raw.base_time_ns,
        origin_ns=raw.origin_ns,
        events=raw.events.iloc[:0],
        comm_args=raw.comm_args.iloc[:0],
        thread_names=raw.thread_names,
    )
    return _Parsed(light, table)


# (files, world hint, progress) -> one parse result per file, in order.
ParseFiles = Callable[[list[Path], int, "bool | None"], "list[_Parsed | TraceFileError]"]


def _parse_all(
    files: list[Path], world_hint: int, progress: bool | None
) -> list[_Parsed | TraceFileError]:
    sizes = [f.stat().st_size for f in files]
    total = sum(sizes)
    # One worker per two CPUs: decoding is memory-bound, and two decoders sharing a core's
    # hyperthreads are no faster than one (measured on a 2-vCPU machine).
    workers = min(len(files), (os.cpu_count() or 1) // 2)
    parallel = workers > 1 and total >= PARALLEL_MIN_BYTES
    show = (
        progress if progress is not None else (total >= PROGRESS_MIN_BYTES and sys.stderr.isatty())
    )
    results: list[_Parsed | TraceFileError] = []
    advance: Callable[[Path], None] = lambda _p: None  # noqa: E731

    from contextlib import ExitStack

    with ExitStack() as stack:
        if show:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            prog = stack.enter_context(
                Progress(
                    TextColumn("loading traces"),
                    BarColumn(),
                    TextColumn("{task.completed}/{task.total} files"),
                    TimeElapsedColumn(),
                    console=Console(stderr=True),
                    transient=True,
                )
            )
            task = prog.add_task("load", total=len(files))
            advance = lambda _p: prog.advance(task)  # noqa: E731
        if parallel:
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=workers))
            futures = [pool.submit(_parse_one, f, world_hint) for f in files]
            for f, fut in zip(files, futures, strict=False):
                results.append(fut.result())
                advance(f)
        else:
            for f in files:
                results.append(_parse_one(f, world_hint))
                advance(f)
    return results


def _read_run_meta(dirs: Iterable[Path], warnings: list[str]) -> tuple[dict[str, Any] | None, bool]:
    meta: dict[str, Any] | None = None
    completed = False
    for d in dirs:
        partial = sorted(d.glob("*.partial"))
        path = d / RUN_META
        if path.is_file():
            try:
                loaded = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as e:
                warnings.append(f"{path}: unreadable run.json ({e}); analysed as plain traces")
                continue
            if isinstance(loaded, dict):
                meta = loaded
                completed = not partial
                pred = loaded.get("predicted")
                if isinstance(pred, dict):
                    warnings.append(
                        f"{d}: a what-if prediction ({pred.get('scenario')} from "
                        f"{pred.get('from')}), not a measured run"
                    )
        if partial:
            warnings.append(
                f"{d}: {partial[0].name} present: not a completed overlapscope run; "
                "analysed as plain traces"
            )
    return meta, completed


def load_run(
    paths: Path | str | Sequence[Path | str],
    *,
    progress: bool | None = None,
    allow_missing_ranks: bool = False,
    parse_files: ParseFiles | None = None,
) -> RunTraces:
    """Load the traces of one run into one aligned event table.

    ``paths``: a run directory or trace files of one run. Raises
    :class:`~overlapscope.errors.UserError` (one line: the file, what is wrong, the fix)
    for a trace that cannot be read, a rank without a trace, two traces of one rank or
    traces of two runs. ``allow_missing_ranks``: analyse the readable traces instead, with
    the problems in ``RunTraces.warnings``. Other tools' JSON files in a directory are
    skipped with a warning either way. ``parse_files``: parses the files instead of local
    worker processes (``overlapscope.cluster`` runs them on a Dask cluster).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    path_list = [Path(p) for p in paths]
    if not path_list:
        raise UserError("no trace path given; pass a run directory or trace files")
    warnings: list[str] = []
    strict = not allow_missing_ranks
    files, dirs = find_trace_files(path_list, strict=strict, warnings=warnings)
    meta, completed = _read_run_meta(dirs, warnings)
    if dirs and meta is None and not any("partial" in w or "run.json (" in w for w in warnings):
        warnings.append("no run.json: not an overlapscope run directory; analysed as plain traces")
    world_hint = int(meta.get("world_size", 0)) if meta else 0

    parsed: list[_Parsed] = []
    errors: list[TraceFileError] = []
    for res in (parse_files or _parse_all)(files, world_hint, progress):
        if isinstance(res, TraceFileError):
            errors.append(res)
        else:
            parsed.append(res)
    if not parsed:
        if len(errors) == 1:
            raise errors[0]
        detail = "; ".join(str(e) for e in errors)
        raise UserError(f"no trace could be analysed: {detail}")
    explicit = {str(p) for p in path_list}
    for e in errors:
        # Another tool's JSON file found in a directory is not a rank: skip it.
        foreign = isinstance(e, NotATraceError) and str(e.path) not in explicit
        if strict and not foreign:
            raise UserError(f"{e}; or pass {ALLOW_FLAG} to analyse the other traces")
    warnings.extend(f"skipped {e}" for e in errors)

    parsed = _resolve_ranks(parsed, warnings, strict)
    world_sizes = {p.raw.world_size for p in parsed if p.raw.world_size is not None}
    if len(world_sizes) > 1:
        listing = ", ".join(f"{p.raw.path.name}: {p.raw.world_size}" for p in parsed)
        raise UserError(
            f"mixed runs: traces report different world sizes ({listing}); "
            "pass the traces of one run"
        )
    world = world_sizes.pop() if world_sizes else max(world_hint, len(parsed))
    ranks_present = sorted(int(p.raw.rank or 0) for p in parsed)
    missing = sorted(set(range(world)) - set(ranks_present))
    if missing and strict and dirs:
        # A directory is taken to hold the whole run; named files are the ranks wanted.
        where = ", ".join(str(d) for d in dirs)
        raise UserError(
            f"{where}: no trace of ranks {missing} (world size {world}); add their traces, "
            f"or pass {ALLOW_FLAG} to analyse the {len(ranks_present)} present"
        )
    if missing:
        warnings.append(
            f"ranks {missing} missing (world size {world}); cross-rank figures use the "
            f"{len(ranks_present)} present"
        )
    if len({p.raw.base_time_ns is None for p in parsed}) > 1:
        warnings.append("some traces lack baseTimeNanoseconds: cross-rank alignment is approximate")

    events, infos = _assemble(parsed, warnings)
    return RunTraces(
        events=events,
        ranks=tuple(infos),
        world_size=world,
        run_meta=meta,
        completed_run=completed,
        warnings=tuple(warnings),
        sources=tuple(files),
    )


def _resolve_ranks(parsed: list[_Parsed], warnings: list[str], strict: bool) -> list[_Parsed]:
    no_info = [p for p in parsed if p.raw.rank is None]
    with_info = [p for p in parsed if p.raw.rank is not None]
    if no_info:
        if len(parsed) == 1:
            warnings.append(
                f"{no_info[0].raw.path}: no distributedInfo: cannot tell the rank; "
                "analysed as rank 0 of 1"
            )
            p = no_info[0]
            return [_Parsed(_with_rank(p.raw, 0), p.table)]
        for p in no_info:
            warnings.append(
                f"skipped {p.raw.path}: no distributedInfo, so its rank is unknown; "
                "export traces with torch.distributed initialised"
            )
    seen: dict[int, Path] = {}
    out: list[_Parsed] = []
    for p in sorted(with_info, key=lambda q: str(q.raw.path)):
        rank = int(p.raw.rank or 0)
        if rank in seen and strict:
            raise UserError(
                f"{p.raw.path} and {seen[rank]}: two traces of rank {rank}; pass the traces "
                f"of one run, or {ALLOW_FLAG} to keep the first"
            )
        if rank in seen:
            warnings.append(
                f"duplicate rank {rank}: {p.raw.path} and {seen[rank]}; kept {seen[rank]}"
            )
            continue
        seen[rank] = p.raw.path
        out.append(p)
    if not out:
        raise UserError(
            "no trace could be analysed: none has distributedInfo to tell its rank; "
            "export traces with torch.distributed initialised"
        )
    return out


def _with_rank(raw: RawTrace, rank: int) -> RawTrace:
    return RawTrace(
        path=raw.path,
        rank=rank,
        world_size=1,
        backend=raw.backend,
        base_time_ns=raw.base_time_ns,
        origin_ns=raw.origin_ns,
        events=raw.events,
        comm_args=raw.comm_args,
        thread_names=raw.thread_names,
    )


def _assemble(parsed: list[_Parsed], warnings: list[str]) -> tuple[pd.DataFrame, list[RankInfo]]:
    epoch = min(p.raw.origin_ns for p in parsed)
    frames: list[pd.DataFrame] = []
    infos: list[RankInfo] = []
    for p in sorted(parsed, key=lambda q: int(q.raw.rank or 0)):
        rank = int(p.raw.rank or 0)
        shift_us = (p.raw.origin_ns - epoch) / 1000.0
        ev = p.table.events
        ev = ev.assign(ts_us=ev["ts_us"] + shift_us, end_us=ev["end_us"] + shift_us)
        ev.insert(0, "rank", np.int32(rank))
        frames.append(ev)
        warnings.extend(f"rank {rank} ({p.raw.path.name}): {w}" for w in p.table.warnings)
        infos.append(
            RankInfo(
                rank=rank,
                path=p.raw.path,
                world_size=p.raw.world_size,
                backend=p.raw.backend,
                framework=p.table.framework,
                compute_source=p.table.compute_source,
                steps=p.table.steps,
                num_events=len(ev),
                has_gpu=bool(ev["on_gpu"].any()),
                base_time_ns=p.raw.base_time_ns,
            )
        )
    events = _concat_categorical(frames)
    return events, infos


def _concat_categorical(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate rank tables keeping categorical columns categorical (union of categories)."""
    cat_cols = [c for c, t in EVENT_COLUMNS.items() if t == "category"]
    unions = {
        c: pd.api.types.union_categoricals([f[c].array for f in frames]).categories
        for c in cat_cols
    }
    fixed = [
        f.assign(**{c: pd.Categorical(f[c], categories=unions[c]) for c in cat_cols})
        for f in frames
    ]
    out = pd.concat(fixed, ignore_index=True)
    out["rank"] = out["rank"].astype(np.int32)
    return out[list(EVENT_COLUMNS)]
