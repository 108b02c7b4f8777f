"""A 64-rank run (re-ranked copies of a shipped run, tests/conftest.py ``ranks64``): one
process per rank, a valid file, and its partition read back as the source's."""

from __future__ import annotations

import numpy as np

from overlapscope.analysis.api import analyze
from overlapscope.trace.run.loader import load_run
from tests.conftest import RankSet
from tests.perfetto.conftest import export
from tests.perfetto.test_export import PARTITION


def test_64_ranks_export_and_read_back(ranks64: RankSet, out_dir) -> None:  # type: ignore[no-untyped-def]
    done = export(ranks64.run, out_dir)
    ranks = sorted(a["rank"] for a in done.trace.processes.values() if "rank" in a)
    assert ranks == list(range(64))
    assert len({e["tid"] for e in done.trace.events}) > 64 * 3  # each rank's own tracks
    again = analyze(load_run(done.path, progress=False))
    a = done.analysis.steps.sort_values(["rank", "step"]).reset_index(drop=True)
    b = again.steps.sort_values(["rank", "step"]).reset_index(drop=True)
    assert a[["rank", "step"]].equals(b[["rank", "step"]])
    np.testing.assert_allclose(b[PARTITION].to_numpy(), a[PARTITION].to_numpy(), atol=1e-6)
