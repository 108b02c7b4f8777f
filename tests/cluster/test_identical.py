"""``--dask`` gives the local report, figure for figure, on real runs (issue 18, point 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from overlapscope.cli import main
from overlapscope.cluster.client import PROFILE_OFF_ENV
from overlapscope.pipeline.tasks import DONE
from tests.cluster.conftest import DaskProcesses
from tests.conftest import EXTERNAL_TRACES, REPO, RankSet

SHIPPED = sorted(p for p in (REPO / "traces").iterdir() if (p / "run.json").is_file())
# Small external traces, one run each: GPU (AMD, H100), CPU only, no distributedInfo (the
# rank is guessed, with a warning). The big ones cost seconds and add no new case (all of
# them were compared once by hand: identical).
EXTERNAL = [
    "hta-amd-mi250-rank0.json.gz",
    "hta-cpu-only-rank34.json.gz",
    "hta-no-distributed-info.json.gz",
    "tracelens-h100-Falconsai_nsfw_image_detection__1016002.json.gz",
]


def report(
    capsys: pytest.CaptureFixture[str], tmp: Path, paths: list[Path], *flags: str
) -> tuple[str, str]:
    """(JSON document, text report) of ``overlapscope analyze``."""
    out = tmp / f"report-{len(list(tmp.glob('report-*')))}.json"
    rc = main(["analyze", *map(str, paths), "--json", str(out), *flags])
    text = capsys.readouterr().out
    assert rc == 0, text
    return out.read_text(), text


def test_shipped_runs_identical_on_scheduler(
    dask_two_workers: DaskProcesses, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert SHIPPED, "no shipped runs under traces/"
    flags = ("--dask", dask_two_workers.address, "--cache", str(tmp_path / "cache"))
    for run in SHIPPED:
        assert report(capsys, tmp_path, [run], *flags) == report(capsys, tmp_path, [run]), run
    # Every rank file of every run was parsed by a task and cached.
    rank_files = sum(len(list(run.glob("rank-*.pt.trace.json.gz"))) for run in SHIPPED)
    assert len(list((tmp_path / "cache").glob("*.arrow"))) == rank_files
    # Workers started by hand, without ARROW_DEFAULT_MEMORY_POOL: the tasks chose the
    # system allocator themselves (docs/BENCHMARKS.md, "Many ranks on Dask").
    from distributed import Client

    with Client(dask_two_workers.address, timeout=60) as client:
        assert set(client.run(_arrow_pool).values()) == {"system"}


def _arrow_pool() -> str:
    import pyarrow

    return str(pyarrow.default_memory_pool().backend_name)


def test_external_traces_identical(
    dask_two_workers: DaskProcesses, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not EXTERNAL_TRACES.is_dir():
        pytest.skip(f"shared external traces absent ({EXTERNAL_TRACES})")
    flags = ("--dask", dask_two_workers.address, "--cache", str(tmp_path / "cache"))
    for name in EXTERNAL:
        path = [EXTERNAL_TRACES / name]
        assert report(capsys, tmp_path, path, *flags) == report(capsys, tmp_path, path), name


def test_64_ranks_identical(
    dask_two_workers: DaskProcesses,
    ranks64: RankSet,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """(Its cache is the session's 64-rank one: the dashboard's tests open it from there.)"""
    run = ranks64.run
    flags = ("--dask", dask_two_workers.address, "--cache", str(ranks64.cache))
    on_dask = report(capsys, tmp_path, [run], *flags)
    assert on_dask == report(capsys, tmp_path, [run])
    assert '"world_size": 64' in on_dask[0]


def test_local_cluster_identical(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = str(SHIPPED[-1])
    out = tmp_path / "local.json"
    assert (
        main(["analyze", run, "--json", str(out), "--dask", "local", "--cache", str(tmp_path)]) == 0
    )
    on_dask = capsys.readouterr()
    # the local workers run without Dask's profiler, so there is nothing to warn of
    assert "profiler" not in on_dask.err
    assert (out.read_text(), on_dask.out) == report(capsys, tmp_path, [SHIPPED[-1]])


def test_diagnose_identical_on_scheduler(
    dask_two_workers: DaskProcesses, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = str(SHIPPED[0])
    assert (
        main(["diagnose", run, "--dask", dask_two_workers.address, "--cache", str(tmp_path)]) == 0
    )
    on_dask = capsys.readouterr()
    assert main(["diagnose", run]) == 0
    local = capsys.readouterr()
    assert local.out == on_dask.out
    # Workers started by hand run Dask's profiler by default: one line says so and how to
    # turn it off; the rest of stderr is the local run's.
    warning, _, rest = on_dask.err.partition("\n")
    assert warning.startswith(f"warning: --dask {dask_two_workers.address}: 2 of 2 workers run")
    assert PROFILE_OFF_ENV in warning
    assert rest == local.err


def test_no_align_and_csv_identical(
    dask_two_workers: DaskProcesses, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--no-align`` (offsets estimated, not applied) and ``--csv`` (which gathers every
    rank's timeline rows) give the local tables too. The ranks are first reduced by a plain
    ``analyze``, which makes no timeline rows: ``--csv`` then has them made from the cache,
    a task per rank."""
    run = [SHIPPED[0]]
    cache = tmp_path / "cache"
    flags = ("--dask", dask_two_workers.address, "--cache", str(cache))
    report(capsys, tmp_path, run, "--no-align", *flags)
    assert len(list(cache.glob(f"*/{DONE}"))) == 2
    assert not list(cache.glob(f"*/{'timeline.arrow'}"))
    on_dask = report(capsys, tmp_path, run, "--no-align", "--csv", str(tmp_path / "d"), *flags)
    assert on_dask == report(capsys, tmp_path, run, "--no-align", "--csv", str(tmp_path / "l"))
    names = sorted(p.name for p in (tmp_path / "l").iterdir())
    assert "timeline.csv" in names and "critical_path_links.csv" in names
    for name in names:
        assert (tmp_path / "d" / name).read_bytes() == (tmp_path / "l" / name).read_bytes(), name
    assert len(list(cache.glob(f"*/{'timeline.arrow'}"))) == 2
