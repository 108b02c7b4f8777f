"""``analyze --perfetto FILE`` through the pipeline: each rank's part of the file written by a
task, on this machine or on Dask.

The client plans the file from the run's analysis (the tables of every collective, link and
finding: no event), then one task per rank reads that rank's transfers and exposed intervals
from its cached figures, and its source file, and writes its compressed part into the cache
(:func:`overlapscope.perfetto.part.write_part`); the client joins the parts by copying their
bytes (:func:`overlapscope.perfetto.export.assemble`). The file is the one
:func:`overlapscope.perfetto.export.write_perfetto` writes from the loaded run, byte for byte.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pandas as pd

from overlapscope.analysis.api import RunAnalysis
from overlapscope.cache import Cache, code_digest, healing
from overlapscope.errors import UserError
from overlapscope.perfetto.export import assemble
from overlapscope.perfetto.part import PartDone, RankPart, write_part
from overlapscope.perfetto.plan import IDLE_GAPS, make_plan, rank_parts
from overlapscope.pipeline.memory import released
from overlapscope.pipeline.plan import Inputs
from overlapscope.pipeline.run import (
    PARALLEL_MIN_EVENTS,
    StoredAnalysis,
    Target,
    analyse,
    opened,
)
from overlapscope.pipeline.tasks import _same_code, discarding, figure_file, read_summary
from overlapscope.sealed import dump, load, temporary_prefix
from overlapscope.table_files import read_table

PART, DONE = "part", "done"
Selection = tuple[tuple[int, ...] | None, tuple[int, ...] | None]  # --steps, --ranks


def perfetto_part(part: RankPart, folder: str, cache_root: str, out: str, digest: str) -> None:
    """One rank's part: its figures from the cache (``folder``), then the part into
    ``out/rank-<r>.part``, and what it holds into ``.done`` (written last)."""
    _same_code(digest)
    with released(), discarding(cache_root):
        tables = read_summary(Path(cache_root) / folder)["tables"]
        part = part.with_rows(tables["comm"], tables["exposed"], _idle(tables, folder, cache_root))
        file = Path(out) / f"rank-{part.rank}.{PART}"
        with open(file, "wb") as f:
            done = write_part(part, f)
        dump(Path(out) / f"rank-{part.rank}.{DONE}", done)


def _idle(tables: dict[str, pd.DataFrame], folder: str, cache_root: str) -> pd.DataFrame | None:
    """The rank's GPU idle gaps where its figures hold them: in its summary, or in a file
    of their own (an event-sized figure); None where the analysis makes none."""
    if IDLE_GAPS in tables:
        return tables[IDLE_GAPS]
    file = figure_file(Path(cache_root) / folder, IDLE_GAPS)
    return read_table(file) if file.is_file() else None


def analyze_and_export(
    inputs: Inputs, target: Target, path: Path, selection: Selection, *, timeline: bool = False
) -> tuple[RunAnalysis, tuple[str, ...]]:
    """The analysis of ``inputs`` (:func:`~overlapscope.pipeline.run.analyse`'s) and its export into ``path``, in one cache; the export's warnings. Every
    rank's on-demand figures are made into its folder: the GPU idle gaps' track reads them."""
    with opened(target) as cache:

        def export() -> tuple[RunAnalysis, tuple[str, ...]]:
            done = analyse(inputs, target, cache, timeline=timeline, timeline_files=True)
            return done.analysis, export_stored(path, done, target, cache, selection)

        return healing(cache, export)


def export_stored(
    path: Path, where: StoredAnalysis, target: Target, cache: Cache, selection: Selection
) -> tuple[str, ...]:
    """The file of the analysis ``where`` (which says where each rank's figures lie in
    ``cache``), its parts written by one task per rank on ``target``'s executor."""
    analysis, infos = where.analysis, where.infos
    folders = dict(zip(where.ranks, where.folders, strict=True))
    plan = make_plan(analysis, infos, *selection)
    parts = list(rank_parts(analysis, infos, plan, None))
    # (named as the cache's temporary files are: removed if this process is killed)
    out = Path(tempfile.mkdtemp(prefix=temporary_prefix("perfetto"), suffix=".tmp", dir=cache.root))
    try:
        args = [(p, folders[p.rank], str(cache.root), str(out), code_digest()) for p in parts]
        names = [str(p.rank) for p in parts]
        heavy = sum(i.num_events for i in infos) >= PARALLEL_MIN_EVENTS  # (a pool, as _reduce)
        with target.executor() as executor:
            stored = lambda n: (out / f"rank-{n}.{DONE}").is_file()  # noqa: E731
            failed = executor.run(perfetto_part, args, names, stored, heavy=heavy)
        if failed:
            rank, why = next(iter(failed.items()))
            raise UserError(
                f"--perfetto: the parts of {len(failed)} ranks were not written "
                f"{executor.where} (rank {rank}: {why}); run again"
            )
        dones: list[PartDone] = [load(out / f"rank-{p.rank}.{DONE}") for p in parts]
        files = [(out / f"rank-{p.rank}.{PART}", d.sum) for p, d in zip(parts, dones, strict=True)]
        assemble(path, plan, files)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return (*plan.warnings, *(w for d in dones for w in d.warnings))
