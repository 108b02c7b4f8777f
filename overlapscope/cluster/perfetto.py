"""``analyze --dask ... --perfetto FILE``: each rank's part of the file written by a task.

The client plans the file from the run's analysis (read back from the cache: the tables of
every collective, link and finding, no event), then one task per rank reads that rank's
transfers and exposed intervals from its cached tables and its source file, and writes its
compressed part into the cache (:func:`overlapscope.perfetto.part.write_part`); the client
joins the parts by copying their bytes (:func:`overlapscope.perfetto.export.assemble`). The
file is the one ``analyze --perfetto`` writes without ``--dask``, byte for byte.
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from overlapscope.cluster.cache import analysis_digest, atomic
from overlapscope.cluster.client import LazyClient, run_tasks
from overlapscope.cluster.run import DaskAnalysis, DaskTarget, analyze_with_tables
from overlapscope.cluster.tasks import _same_code, read_summary, released
from overlapscope.errors import UserError
from overlapscope.perfetto.export import assemble
from overlapscope.perfetto.part import PartDone, RankPart, write_part
from overlapscope.perfetto.plan import make_plan, rank_parts

PART, DONE = "part", "done"


def perfetto_part(part: RankPart, folder: str, cache_root: str, out: str, digest: str) -> None:
    """One rank's part: its tables from the cache (``folder``), then the part into
    ``out/rank-<r>.part``, and what it holds into ``.done`` (written last)."""
    _same_code(digest, analysis_digest())
    with released():
        tables = read_summary(Path(cache_root) / folder)["tables"]
        part = part.with_rows(tables["comm"], tables["exposed"])
        file = Path(out) / f"rank-{part.rank}.{PART}"
        with open(file, "wb") as f:
            done = write_part(part, f)
        data = pickle.dumps(done)
        atomic(Path(out) / f"rank-{part.rank}.{DONE}", lambda t: t.write_bytes(data))


def export_on_dask(
    paths: Sequence[Path],
    target: DaskTarget,
    flags: tuple[bool, bool, bool, bool],
    path: Path,
    selection: tuple[tuple[int, ...] | None, tuple[int, ...] | None],
) -> tuple[str, ...]:
    """Write ``path`` from the analysis of ``paths`` on Dask (``flags`` as
    :func:`~overlapscope.cluster.run.analyze_with_tables` takes them: the analysis just made
    is read back from its cache entry); ``selection``: ``--steps``, ``--ranks``. The
    warnings."""
    done = analyze_with_tables(paths, target, flags, flags[3])
    return write_on_dask(path, done, target, *selection)


def write_on_dask(
    path: Path,
    where: DaskAnalysis,
    target: DaskTarget,
    steps: tuple[int, ...] | None,
    ranks: tuple[int, ...] | None,
) -> tuple[str, ...]:
    """The file of the analysis ``where`` (which says where each rank's tables lie), its
    parts written by one task per rank."""
    analysis, infos = where.analysis, where.infos
    folders = dict(zip(where.ranks, where.folders, strict=True))
    plan = make_plan(analysis, infos, steps, ranks)
    parts = list(rank_parts(analysis, infos, plan, None))
    cache = target.cache()
    cache.prepare()
    out = Path(tempfile.mkdtemp(prefix="perfetto-", dir=cache.root))
    try:
        args = [(p, folders[p.rank], str(cache.root), str(out), analysis_digest()) for p in parts]
        names = [str(p.rank) for p in parts]
        with LazyClient(target.address) as client:
            stored = lambda n: (out / f"rank-{n}.{DONE}").is_file()  # noqa: E731
            failed = run_tasks(client.get(), perfetto_part, args, names, stored)
        if failed:
            rank, why = next(iter(failed.items()))
            raise UserError(
                f"--perfetto: the parts of {len(failed)} ranks were not written on the Dask "
                f"cluster (rank {rank}: {why}); run again"
            )
        dones: list[PartDone] = [
            pickle.loads((out / f"rank-{p.rank}.{DONE}").read_bytes()) for p in parts
        ]
        files = [(out / f"rank-{p.rank}.{PART}", d.sum) for p, d in zip(parts, dones, strict=True)]
        assemble(path, plan, files)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return (*plan.warnings, *(w for d in dones for w in d.warnings))
