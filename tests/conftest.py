"""Shared test helpers: real multi-process gloo runs on CPU; the suite's last-resort watchdog."""

from __future__ import annotations

import faulthandler
import os
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch.multiprocessing as mp

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
EXTERNAL_TRACES = SHARED / "external-traces"


# pytest-timeout (pyproject's ``timeout``) fails a test that runs too long from a SIGALRM
# handler, which runs only once the main thread is back in Python. Should a test be stuck where
# it never is, this dumps every thread's stack and ends the run this long after the bound:
# a hang costs minutes of CI, never all of it.
WATCHDOG_GRACE_S = float(os.environ.get("OVERLAPSCOPE_TEST_WATCHDOG_GRACE_S", "120"))
# The stderr the run started with, kept while pytest_configure runs (output is not captured
# then): a test's own stderr is captured into a file that an exit would lose.
_watchdog_err: list[Any] = []


def pytest_configure(config: pytest.Config) -> None:
    _watchdog_err.append(os.fdopen(os.dup(2), "w"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    option = item.config.getoption("timeout", None)
    bound = float(item.config.getini("timeout") if option is None else option or 0)
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        bound = float(marker.args[0])
    if bound > 0:
        faulthandler.dump_traceback_later(
            bound + WATCHDOG_GRACE_S, exit=True, file=_watchdog_err[0]
        )
    try:
        yield
    finally:
        if bound > 0:
            faulthandler.cancel_dump_traceback_later()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(rank: int, fn: Callable[..., Any], world: int, port: int, args: tuple[Any, ...]) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        fn(rank, world, *args)
        dist.barrier()  # no rank leaves while a peer still talks to it
    finally:
        dist.destroy_process_group()
    # Leave without the interpreter's teardown: gloo's and the engine's C++ threads
    # intermittently abort a finished process there ("terminate called without an active
    # exception", SIGABRT; seen in CI on the parity test), as in engine/worker.py. A failure
    # above still raises through mp.spawn as usual.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn(fn: Callable[..., Any], world: int, *args: Any) -> None:
    """Run ``fn(rank, world, *args)`` in ``world`` real processes joined by gloo."""
    mp.spawn(_entry, args=(fn, world, free_port(), args), nprocs=world, join=True)


def overlapscope_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "overlapscope", *args]


# Runs made by make_runs this session, by their flags (flag order aside): a recipe two test
# modules both need runs once. Tests only read these runs.
_RUNS: dict[tuple[tuple[str, ...], ...], Path] = {}


def _recipe_key(flags: list[str]) -> tuple[tuple[str, ...], ...]:
    groups: list[list[str]] = []
    for token in flags:
        if token.startswith("--") or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    return tuple(sorted(tuple(g) for g in groups))


def make_runs(base: Path, common: list[str], variants: dict[str, list[str]]) -> dict[str, Path]:
    """``overlapscope run`` once per variant (real torchrun, gloo), into ``base/<name>``;
    a recipe already run in this session is shared, not run again."""
    import subprocess

    out = {}
    for name, flags in variants.items():
        key = _recipe_key([*common, *flags])
        if key in _RUNS:
            out[name] = _RUNS[key]
            continue
        run = base / name
        proc = subprocess.run(
            overlapscope_cmd("run", *common, *flags, "--out", str(run)),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        out[name] = _RUNS[key] = run
    return out


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every analysis of the suite (in this process and the commands it starts) caches in a
    folder of its own, never the user's cache."""
    with pytest.MonkeyPatch.context() as m:
        root = tmp_path_factory.mktemp("cache")
        m.setenv("OVERLAPSCOPE_CACHE", str(root))
        m.delenv("OVERLAPSCOPE_CACHE_DIR", raising=False)
        yield root


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


def _torch_fsdp_run(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real torch FSDP run (2 gloo ranks, tests/trace/torch_fsdp_run.py), in a subprocess."""
    import subprocess

    out = tmp_path_factory.mktemp(kind)
    script = REPO / "tests" / "trace" / "torch_fsdp_run.py"
    subprocess.run(
        [sys.executable, str(script), kind, str(out)], check=True, capture_output=True, timeout=300
    )
    return out


@pytest.fixture(scope="session")
def fsdp2_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real torch FSDP2 CPU run for the whole session (analysis, what-if, clocks)."""
    return _torch_fsdp_run("fsdp2", tmp_path_factory)


@pytest.fixture(scope="session")
def fsdp1_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real torch FSDP1 CPU run for the whole session."""
    return _torch_fsdp_run("fsdp1", tmp_path_factory)


@dataclass(frozen=True, slots=True)
class RankSet:
    """A many-rank run made of re-ranked copies of a shipped run, and the ``--dask`` cache
    its tests share (a second analysis of it reads the result back: no task runs)."""

    run: Path
    cache: Path
    num_ranks: int


@pytest.fixture(scope="session")
def ranks64(tmp_path_factory: pytest.TempPathFactory) -> RankSet:
    """64 ranks (``overlapscope.cluster.synth.rerank_copies`` of the first shipped run, 0.5 s)
    for tests/cluster and tests/dashboard; its analysis is cached in ``cache`` by the first
    test that makes it."""
    from overlapscope.cluster.synth import rerank_copies

    source = sorted(p for p in (REPO / "traces").iterdir() if (p / "run.json").is_file())[0]
    base = tmp_path_factory.mktemp("ranks64")
    rerank_copies(source, 64, base / "run64")
    return RankSet(base / "run64", base / "cache", 64)
