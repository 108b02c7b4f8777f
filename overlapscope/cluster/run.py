"""Load a run with one Dask task per rank file: :func:`load_run_on_dask`.

Each task runs the loader's own per-file path (decode + recognise one file) on a worker and
writes that rank's event table to the :class:`~overlapscope.cluster.cache.RankCache`; the
client then reads the cached tables and the loader assembles the run exactly as it does for
local parsing (same rank checks, same clock alignment), so the analysis that follows is the
local one, figure for figure. Files already in the cache start no task (and no cluster).

A worker lost mid-run has its tasks retried by the scheduler; a rank file that still fails is
an error naming every file not analysed (with ``--allow-missing-ranks``: a warning each).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from overlapscope.cluster.cache import RankCache, default_cache_dir, entry_key, parser_digest
from overlapscope.errors import UserError
from overlapscope.trace.loader import ALLOW_FLAG, ParseFiles, RunTraces, _Parsed, load_run
from overlapscope.trace.parse import TraceFileError

if TYPE_CHECKING:
    from distributed import Client, Future

LOCAL = "local"
CONNECT_TIMEOUT_S = 10
POLL_S = 2.0
NO_WORKER_S = 60.0
INSTALL_HINT = "pip install 'overlapscope[cluster]'"


def parse_to_cache(path: str, world_hint: int, cache_root: str, key: str, digest: str) -> str:
    """The task run on a worker: parse one rank file, store the result, return its key.

    ``digest``: the client's parser digest; a worker whose overlapscope parses differently
    refuses (its tables would be cached under the client's key)."""
    from overlapscope.trace.loader import _parse_one

    if parser_digest() != digest:
        raise RuntimeError(
            "this worker's overlapscope parser differs from the client's; install the same "
            "overlapscope version on the workers"
        )
    RankCache(Path(cache_root)).write(key, _parse_one(Path(path), world_hint))
    return key


@contextlib.contextmanager
def connect(address: str) -> Iterator[Client]:
    """A client of the scheduler at ``address``, or of a new LocalCluster for ``local``."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as e:
        raise UserError(f"--dask needs Dask's distributed package; {INSTALL_HINT}") from e
    if address == LOCAL:
        cluster = LocalCluster(
            threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=50
        )
        with cluster, Client(cluster) as client:
            yield client
        return
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(
            f"--dask {address}: cannot reach the Dask scheduler ({reason}); start one with "
            "'dask scheduler' and pass its address (tcp://HOST:8786), or pass --dask local"
        ) from e
    with client:
        yield client


def _run_tasks(
    client: Client, todo: list[tuple[Path, str]], world_hint: int, cache: RankCache
) -> dict[str, str]:
    """Run the parse tasks; returns {key: why it failed} for the files not analysed."""
    futures = client.map(
        parse_to_cache,
        [str(p.resolve()) for p, _ in todo],
        [world_hint] * len(todo),
        [str(cache.root.resolve())] * len(todo),
        [k for _, k in todo],
        [parser_digest()] * len(todo),
        key=[f"overlapscope-parse-{k}" for _, k in todo],
        pure=False,
    )
    by_key = {str(f.key): k for f, (_, k) in zip(futures, todo, strict=True)}
    failed: dict[str, str] = {}
    for fut in _completed(client, futures, failed, by_key):
        key = by_key[str(fut.key)]
        if fut.status != "finished":
            exc = fut.exception()
            failed[key] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        elif not cache.has(key):
            failed[key] = (
                f"the worker's cache entry is not visible here; pass --cache with a directory "
                f"shared by the workers and this machine (now {cache.root})"
            )
    return failed


def _completed(
    client: Client, futures: list[Future], failed: dict[str, str], by_key: dict[str, str]
) -> Iterator[Future]:
    """The futures as they finish; when no worker is left for ``NO_WORKER_S``, the rest
    are cancelled and recorded in ``failed`` (the scheduler would wait for one forever)."""
    from distributed import wait

    pending = set(futures)
    idle_since: float | None = None
    while pending:
        try:
            done, pending = wait(pending, timeout=POLL_S, return_when="FIRST_COMPLETED")
        except TimeoutError:
            done = set()
        yield from done
        if pending and not client.scheduler_info()["workers"]:
            idle_since = idle_since if idle_since is not None else time.monotonic()
            if time.monotonic() - idle_since > NO_WORKER_S:
                why = f"no worker connected to the scheduler for {NO_WORKER_S:.0f} s"
                failed.update({by_key[str(f.key)]: why for f in pending})
                client.cancel(list(pending))
                return
        else:
            idle_since = None


def dask_parse_files(address: str, cache: RankCache, strict: bool) -> ParseFiles:
    """The loader's ``parse_files`` hook: cached tables, the rest parsed on the cluster."""

    def parse(
        files: list[Path], world_hint: int, _progress: bool | None
    ) -> list[_Parsed | TraceFileError]:
        keys = [entry_key(f, world_hint) for f in files]
        todo = [(f, k) for f, k in zip(files, keys, strict=True) if not cache.has(k)]
        failed: dict[str, str] = {}
        if todo:
            with connect(address) as client:
                failed = _run_tasks(client, todo, world_hint, cache)
        lost = [f for f, k in zip(files, keys, strict=True) if k in failed]
        if lost and strict:
            reason = failed[entry_key(lost[0], world_hint)]
            names = ", ".join(str(f) for f in lost)
            raise UserError(
                f"{len(lost)} rank files not analysed on the Dask cluster ({reason}): {names}; "
                f"run again (analysed ranks are cached), or pass {ALLOW_FLAG} to analyse the rest"
            )
        return [
            TraceFileError(f, f"not analysed on the Dask cluster ({failed[k]})")
            if k in failed
            else cache.read(k, f)
            for f, k in zip(files, keys, strict=True)
        ]

    return parse


def load_run_on_dask(
    paths: list[Path],
    address: str,
    *,
    cache_dir: Path | None = None,
    allow_missing_ranks: bool = False,
    rank_from_names: bool = False,
) -> RunTraces:
    """:func:`~overlapscope.trace.loader.load_run`, parsing each rank file in a Dask task."""
    cache = RankCache(cache_dir if cache_dir is not None else default_cache_dir())
    cache.prepare()
    parse = dask_parse_files(address, cache, strict=not allow_missing_ranks)
    return load_run(
        paths,
        allow_missing_ranks=allow_missing_ranks,
        rank_from_names=rank_from_names,
        parse_files=parse,
    )
