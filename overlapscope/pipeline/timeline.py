"""One step of a few ranks' timeline rows, read from the cache on demand.

The dashboard's analysis of a run opened with ``--dask`` has each rank's drawable events
written as ``<cache>/<folder>/timeline.arrow`` (:mod:`overlapscope.pipeline.tasks`: by the
reduce task, or by an on-demand task for a rank a plain ``analyze`` reduced without them).
:class:`RankTimelines` reads, for the ranks asked for only, the rows of one step and the
columns asked for: what a dashboard
of a 1,000-rank run draws without ever holding the other ranks' events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from overlapscope.analysis.registry import TIMELINE
from overlapscope.errors import UserError
from overlapscope.pipeline.run import StoredAnalysis
from overlapscope.pipeline.tasks import figure_file
from overlapscope.table_files import empty_table, read_table


def read_rank_step(path: Path, step: int, columns: Sequence[str]) -> pd.DataFrame:
    """The rows of ``step`` of one rank's timeline file, ``columns`` only."""
    return read_table(path, [("step", "==", step)], list(columns))


@dataclass(frozen=True, slots=True)
class RankTimelines:
    """Where each rank's timeline lies: ``root / folders[i] / timeline.arrow`` holds the
    rows of rank ``ranks[i]``."""

    root: Path
    ranks: tuple[int, ...]
    folders: tuple[str, ...]

    @classmethod
    def of(cls, root: Path, done: StoredAnalysis) -> RankTimelines:
        return cls(root, done.ranks, done.folders)

    def file(self, rank: int) -> Path:
        try:
            folder = self.folders[self.ranks.index(rank)]
        except ValueError:
            raise UserError(f"rank {rank} is not in this run (ranks {self.span()})") from None
        return figure_file(self.root / folder, TIMELINE)

    def span(self) -> str:
        return f"{min(self.ranks)}-{max(self.ranks)}" if self.ranks else "none"

    def step_rows(self, step: int, ranks: Sequence[int], columns: Sequence[str]) -> pd.DataFrame:
        """The timeline rows of ``step`` of ``ranks`` (in rank order), ``columns`` only;
        the other ranks' files are not opened."""
        wanted = sorted(set(ranks))
        files = [self.file(r) for r in wanted]
        missing = [f for f in files if not f.is_file()]
        if missing:
            raise UserError(
                f"{missing[0].parent}: this rank's tables are no longer in the cache; "
                "restart the dashboard with --dask to analyse the run again"
            )
        if not files:
            return empty_table(self.file(self.ranks[0]))[list(columns)]
        frames = [read_rank_step(f, step, columns) for f in files]
        return pd.concat(frames, ignore_index=True)
