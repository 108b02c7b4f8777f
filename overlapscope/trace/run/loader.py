"""Load a run (a directory of per-rank traces, or trace files) into one event table.

:func:`load_run` is the single entry point. Files are decoded and recognised in parallel
worker processes (one per file, up to the CPU count) when the set is large; the rank of each
file comes from its ``distributedInfo``. Problems with single files become warnings when
other files can still be analysed, and a :class:`~overlapscope.errors.UserError` when nothing
can.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from overlapscope.errors import UserError
from overlapscope.manifest import RunManifest
from overlapscope.pool import PARALLEL_MIN_BYTES, local_map, show_progress
from overlapscope.trace.read.merged import expand_merged
from overlapscope.trace.read.parse import (
    MAX_WORLD_SIZE,
    NotATraceError,
    RawTrace,
    TraceFileError,
    memory_table,
    read_trace,
)
from overlapscope.trace.recognize.table import ComputeSource, RankTable, recognize
from overlapscope.trace.run import same_run
from overlapscope.trace.run.discover import ALLOW_FLAG, find_trace_files
from overlapscope.trace.run.ranks import (
    RANK_FROM_NAME_FLAG,
    check_one_run,
    duplicate_error,
    missing_ranks,
    rank_from_name,
)
from overlapscope.trace.run.runmeta import run_state
from overlapscope.trace.schema import EVENT_COLUMNS


@dataclass(frozen=True, slots=True)
class RankInfo:
    rank: int
    path: Path
    world_size: int | None
    backend: str | None
    framework: str  # the producer that read it (trace/producers)
    compute_source: ComputeSource
    steps: tuple[int, ...]
    num_events: int
    has_gpu: bool
    base_time_ns: int | None
    raw_ts_offset_us: float = 0.0  # the file's own ts = ts_us + raw_ts_offset_us
    num_unlaunched: int = (
        0  # GPU rows without their launch (where they count: recognize/unlaunched.py)
    )


@dataclass(frozen=True, slots=True)
class RunTraces:
    """A loaded run: the event table (see :mod:`overlapscope.trace.schema`) and its context."""

    events: pd.DataFrame
    ranks: tuple[RankInfo, ...]
    world_size: int
    manifest: RunManifest | None  # run.json of an overlapscope run
    completed_run: bool  # an overlapscope run directory with run.json and no *.partial
    warnings: tuple[str, ...]
    sources: tuple[Path, ...]
    # the host allocator's total after each [memory] event: rank, ts_us (the events'
    # clock), bytes; empty where the traces record none (trace.decode reads them)
    memory: pd.DataFrame = dataclasses.field(default_factory=lambda: memory_table([]))

    @property
    def has_gpu(self) -> bool:
        return any(r.has_gpu for r in self.ranks)

    def rank_info(self, rank: int) -> RankInfo:
        for r in self.ranks:
            if r.rank == rank:
                return r
        raise KeyError(f"rank {rank} not loaded; loaded: {[r.rank for r in self.ranks]}")


@dataclass(frozen=True, slots=True)
class ParsedRank:
    """One rank file parsed: what every executor hands the loader (:data:`ParseFiles`).

    ``raw``: the file as read (:class:`~overlapscope.trace.read.parse.RawTrace`: its rank, world
    size, clock origin ``origin_ns``, header warnings), its raw event and argument columns
    emptied. ``table``: the recognised per-rank table
    (:class:`~overlapscope.trace.recognize.table.RankTable`: events on the file's own clock,
    producer, steps). The pipeline caches it without the events (``cache.RankMeta``)."""

    raw: RawTrace
    table: RankTable


def epoch_shifts(origins_ns: dict[int, int]) -> dict[int, float]:
    """Each rank's shift onto the run's clock, in µs (0: the earliest origin), from each
    rank's clock origin (``RawTrace.origin_ns``): the one place the loader's shifts are
    made (the pipeline's plan reads them from here too)."""
    epoch = min(origins_ns.values())
    return {r: (o - epoch) / 1000.0 for r, o in origins_ns.items()}


def parse_rank(path: Path, world_hint: int) -> ParsedRank | TraceFileError:
    """Read and recognise one rank file (``world_hint``: the world size where the file
    names none); a :class:`TraceFileError` it cannot be read is returned, not raised."""
    try:
        raw = read_trace(path)
    except TraceFileError as e:
        return e
    world = raw.world_size or world_hint
    table = recognize(raw, world)
    # The recognised table replaces the raw columns; keep only what the loader needs.
    light = dataclasses.replace(raw, events=raw.events.iloc[:0], comm_args=raw.comm_args.iloc[:0])
    return ParsedRank(light, table)


# (files, world hint, progress) -> one parse result per file, in order.
ParseFiles = Callable[[list[Path], int, "bool | None"], "list[ParsedRank | TraceFileError]"]


def _parse_all(
    files: list[Path], world_hint: int, progress: bool | None
) -> list[ParsedRank | TraceFileError]:
    total = sum(f.stat().st_size for f in files)
    return local_map(
        parse_rank,
        [(f, world_hint) for f in files],
        parallel=total >= PARALLEL_MIN_BYTES,
        progress="loading traces" if show_progress(progress, total) else None,
    )


def load_run(
    paths: Path | str | Sequence[Path | str],
    *,
    progress: bool | None = None,
    allow_missing_ranks: bool = False,
    rank_from_names: bool = False,
    parse_files: ParseFiles | None = None,
) -> RunTraces:
    """Load the traces of one run into one aligned event table.

    ``paths``: a run directory or trace files of one run. Raises
    :class:`~overlapscope.errors.UserError` (one line: the file, what is wrong, the fix)
    for a trace that cannot be read, a rank without a trace, two traces of one rank or
    traces of two runs. ``allow_missing_ranks``: analyse the readable traces instead, with
    the problems in ``RunTraces.warnings``. Other tools' JSON files in a directory are
    skipped with a warning either way. ``rank_from_names``: take each file's rank from its
    name (``rank-<N>``) instead of its ``distributedInfo``. ``parse_files``: parses the files
    instead of local worker processes (``overlapscope.cluster`` runs them on a Dask cluster).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    path_list = [Path(p) for p in paths]
    if not path_list:
        raise UserError("no trace path given; pass a run directory or trace files")
    warnings: list[str] = []
    strict = not allow_missing_ranks
    files, dirs, metas = find_trace_files(path_list, strict=strict, warnings=warnings)
    files = expand_merged(files, {p for p in path_list if p.is_file()})
    meta, completed = run_state(metas.items(), warnings)
    if dirs and meta is None and not any("partial" in w for w in warnings):
        warnings.append("no run.json: not an overlapscope run directory; analysed as plain traces")
    world_hint = (meta.world_size or 0) if meta else 0

    parse = parse_files or _parse_all
    parsed = _parse_usable(parse, files, world_hint, progress, path_list, strict, warnings)
    parsed = _resolve_ranks(parsed, warnings, strict, rank_from_names)
    check_one_run([p.raw for p in parsed])
    our_run = bool(dirs) and meta is not None and bool(meta.traces)
    kept = same_run.one_job([p.raw for p in parsed], meta, our_run, strict, warnings)
    parsed = [parsed[i] for i in kept]
    world = _world(parsed, world_hint, dirs, strict, warnings)
    if len({p.raw.base_time_ns is None for p in parsed}) > 1:
        warnings.append("some traces lack baseTimeNanoseconds: cross-rank alignment is approximate")

    events, infos, memory = _assemble(parsed, warnings)
    return RunTraces(
        events=events,
        ranks=tuple(infos),
        world_size=world,
        manifest=meta,
        completed_run=completed,
        warnings=tuple(warnings),
        sources=tuple(files),
        memory=memory,
    )


def _parse_usable(
    parse_files: ParseFiles,
    files: list[Path],
    world_hint: int,
    progress: bool | None,
    path_list: list[Path],
    strict: bool,
    warnings: list[str],
) -> list[ParsedRank]:
    """Parse every file; an unreadable one stops the command unless ``strict`` is off (or it
    is another tool's JSON file found in a directory): then it is a warning."""
    parsed: list[ParsedRank] = []
    errors: list[TraceFileError] = []
    for res in parse_files(files, world_hint, progress):
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

    return parsed


def _world(
    parsed: list[ParsedRank], world_hint: int, dirs: list[Path], strict: bool, warnings: list[str]
) -> int:
    """The run's world size; ranks without a trace stop the command for a directory (it is
    taken to hold the whole run) unless ``strict`` is off, else they are one warning."""
    world = next(
        (p.raw.world_size for p in parsed if p.raw.world_size is not None),
        max(world_hint, len(parsed), *(int(p.raw.rank or 0) + 1 for p in parsed)),
    )
    num_missing, missing = missing_ranks([int(p.raw.rank or 0) for p in parsed], world)
    if num_missing and strict and dirs:
        # A directory is taken to hold the whole run; named files are the ranks wanted.
        where = ", ".join(str(d) for d in dirs)
        raise UserError(
            f"{where}: {num_missing} of {world} ranks have no trace ({missing}); add their "
            f"traces, or pass {ALLOW_FLAG} to analyse the {len(parsed)} present"
        )
    if num_missing:
        warnings.append(
            f"{num_missing} of {world} ranks missing: {missing}; cross-rank figures use the "
            f"{len(parsed)} present"
        )
    return world


def _named_ranks(parsed: list[ParsedRank], warnings: list[str]) -> list[ParsedRank]:
    out = []
    for p in parsed:
        rank = rank_from_name(p.raw.path)
        if rank is not None and rank >= MAX_WORLD_SIZE:
            raise UserError(
                f"{p.raw.path}: {RANK_FROM_NAME_FLAG}: rank {rank} in the file name is out of "
                f"range (< {MAX_WORLD_SIZE}); rename the file, or leave out the flag"
            )
        if rank is None:
            raise UserError(
                f"{p.raw.path}: {RANK_FROM_NAME_FLAG}: the file name carries no rank "
                "(rank-<N>); rename the file, or leave out the flag"
            )
        if p.raw.rank not in (None, rank):
            warnings.append(
                f"{p.raw.path.name}: {RANK_FROM_NAME_FLAG}: rank {rank} taken from the name; "
                f"its distributedInfo says rank {p.raw.rank}"
            )
        out.append(ParsedRank(dataclasses.replace(p.raw, rank=rank), p.table))
    return out


def _resolve_ranks(
    parsed: list[ParsedRank], warnings: list[str], strict: bool, from_names: bool
) -> list[ParsedRank]:
    if from_names:
        parsed = _named_ranks(parsed, warnings)
    no_info = [p for p in parsed if p.raw.rank is None]
    with_info = [p for p in parsed if p.raw.rank is not None]
    if no_info:
        if len(parsed) == 1:
            warnings.append(
                f"{no_info[0].raw.path}: no distributedInfo: cannot tell the rank; "
                "analysed as rank 0 of 1"
            )
            p = no_info[0]
            return [ParsedRank(_with_rank(p.raw, 0), p.table)]
        for p in no_info:
            warnings.append(
                f"skipped {p.raw.path}: no distributedInfo, so its rank is unknown; export "
                f"traces with torch.distributed initialised, or pass {RANK_FROM_NAME_FLAG}"
            )
    seen: dict[int, Path] = {}
    out: list[ParsedRank] = []
    for p in sorted(with_info, key=lambda q: str(q.raw.path)):
        rank = int(p.raw.rank or 0)
        if rank in seen and strict:
            raise duplicate_error(p.raw.path, seen[rank], rank, ALLOW_FLAG)
        if rank in seen:
            warnings.append(
                f"duplicate rank {rank}: {p.raw.path} and {seen[rank]}; kept {seen[rank]}"
            )
            continue
        seen[rank] = p.raw.path
        out.append(p)
    if not out:
        raise UserError(
            "no trace could be analysed: none has distributedInfo to tell its rank; export "
            f"traces with torch.distributed initialised, or pass {RANK_FROM_NAME_FLAG} when "
            "the file names carry the ranks (rank-<N>)"
        )
    return out


def _with_rank(raw: RawTrace, rank: int) -> RawTrace:
    return dataclasses.replace(raw, rank=rank, world_size=1)


def _assemble(
    parsed: list[ParsedRank], warnings: list[str]
) -> tuple[pd.DataFrame, list[RankInfo], pd.DataFrame]:
    """The run's event table, its ranks and its memory table: every rank shifted onto the
    run's clock (0: the earliest event)."""
    shifts = epoch_shifts({int(p.raw.rank or 0): p.raw.origin_ns for p in parsed})
    frames: list[pd.DataFrame] = []
    infos: list[RankInfo] = []
    memory: list[tuple[int, np.ndarray, np.ndarray]] = []
    for p in sorted(parsed, key=lambda q: int(q.raw.rank or 0)):
        rank = int(p.raw.rank or 0)
        shift_us = shifts[rank]
        ev = p.table.events
        ev = ev.assign(ts_us=ev["ts_us"] + shift_us, end_us=ev["end_us"] + shift_us)
        ev.insert(0, "rank", np.int32(rank))
        frames.append(ev)
        memory.append((rank, p.raw.memory_us + shift_us, p.raw.memory_bytes))
        if p.raw.dropped:
            warnings.append(f"{p.raw.dropped} ignored in {p.raw.path.name}")
        for w in (*p.raw.header_warnings, *p.table.warnings):
            warnings.append(f"rank {rank} ({p.raw.path.name}): {w}")
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
                raw_ts_offset_us=p.raw.first_ts_us - shift_us,
                num_unlaunched=p.table.num_unlaunched,
            )
        )
    return _concat_categorical(frames), infos, memory_table(memory)


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
