"""``analyze --dask ... --perfetto FILE`` (issue 35, point 1): each rank's part written by
its task on a real scheduler and workers, the file the same bytes as without ``--dask``."""

from __future__ import annotations

from pathlib import Path

import pytest

from overlapscope.cli import main
from tests.cluster.conftest import DaskProcesses
from tests.conftest import EXTERNAL_TRACES, REPO, RankSet
from tests.perfetto.chrome_trace import read_trace

CASES = [
    ("backward_pre", ()),
    ("backward_pre", ("--steps", "3", "--ranks", "1")),
    ("gpu-engine-gloo2-backward_pre", ()),
]


def _export(tmp: Path, paths: list[Path], *flags: str) -> bytes:
    out = tmp / f"export-{len(list(tmp.glob('export-*')))}.json.gz"
    assert main(["analyze", *map(str, paths), "--perfetto", str(out), *flags]) == 0
    return out.read_bytes()


@pytest.mark.parametrize(("run", "flags"), CASES, ids=[" ".join((r, *f)) for r, f in CASES])
def test_same_file_on_dask(
    dask_two_workers: DaskProcesses, tmp_path: Path, run: str, flags: tuple[str, ...]
) -> None:
    dask = ("--dask", dask_two_workers.address, "--cache", str(tmp_path / "cache"))
    paths = [REPO / "traces" / run]
    on_dask = _export(tmp_path, paths, *flags, *dask)
    assert on_dask == _export(tmp_path, paths, *flags)
    assert not list((tmp_path / "cache").glob("perfetto-*"))  # the parts are gone
    read_trace(tmp_path / "export-0.json.gz")


def test_external_trace_same_file_on_dask(dask_two_workers: DaskProcesses, tmp_path: Path) -> None:
    if not EXTERNAL_TRACES.is_dir():
        pytest.skip(f"shared external traces absent ({EXTERNAL_TRACES})")
    dask = ("--dask", dask_two_workers.address, "--cache", str(tmp_path / "cache"))
    paths = [EXTERNAL_TRACES / "hta-nccl-parser-config-rank0.json.gz"]
    assert _export(tmp_path, paths, *dask) == _export(tmp_path, paths)


def test_64_ranks_same_file_on_dask(
    dask_two_workers: DaskProcesses, ranks64: RankSet, tmp_path: Path
) -> None:
    dask = ("--dask", dask_two_workers.address, "--cache", str(ranks64.cache))
    assert _export(tmp_path, [ranks64.run], *dask) == _export(tmp_path, [ranks64.run])
