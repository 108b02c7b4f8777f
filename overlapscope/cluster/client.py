"""The Dask side of ``--dask``: :class:`DaskExecutor` connects and runs a round of tasks to
the end (the executor protocol of ``overlapscope/pipeline/executor.py``).

Dask is imported here only, and only once a task must run: a re-analysis served by the
cache needs neither the cluster nor the ``cluster`` extra.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from overlapscope.errors import UserError

if TYPE_CHECKING:
    from distributed import Client, Future

LOCAL = "local"
CONNECT_TIMEOUT_S = 10
POLL_S = 2.0
NO_WORKER_S = 60.0
NOT_SHARED = (
    "the worker's cache entry is not visible here; pass --cache with a directory shared by "
    "the workers and this machine"
)
INSTALL_HINT = "pip install 'overlapscope[cluster]'"
# The workers' Arrow buffers from the system allocator, not pyarrow's default mimalloc, which
# kept ~35 MB more resident at the two tasks' peak on a 33 MB rank file, ~25 MB on a 56 MB one
# (measured: docs/BENCHMARKS.md). Workers started by hand get it from the tasks (memory.released).
WORKER_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system"}
# Dask's statistical profiler samples every worker thread's stack every few ms: on two 56 MB
# ranks it cost the worker ~0.2 s of CPU (0.9 -> 1.1-1.5 s) and made its peak vary from 120
# to 150 MB above idle, against 66-69 MB without it (measured: docs/BENCHMARKS.md). Off for
# the workers of --dask local; workers started by hand take it from their Dask config, and
# the client warns when they have it on (:func:`warn_profiling`).
WORKER_CONFIG = {"distributed.worker.profile.enabled": False}
PROFILE_OFF_ENV = "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False"


@contextlib.contextmanager
def connect(address: str) -> Iterator[Client]:
    """A client of the scheduler at ``address``, or of a new LocalCluster for ``local``."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as e:
        raise UserError(f"--dask needs Dask's distributed package; {INSTALL_HINT}") from e
    if address == LOCAL:
        import dask

        with dask.config.set(WORKER_CONFIG):  # the workers are given the config of now
            cluster = LocalCluster(
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",
                silence_logs=50,
                env=WORKER_ENV,
            )
        with cluster, Client(cluster) as client:
            warn_profiling(client, address)  # (none: WORKER_CONFIG turns it off)
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
        warn_profiling(client, address)
        yield client


def profiling() -> bool:
    """Whether this worker runs Dask's statistical profiler (run on each worker)."""
    import dask

    return bool(dask.config.get("distributed.worker.profile.enabled", True))


def warn_profiling(client: Client, address: str) -> None:
    """One line on stderr when workers of ``address`` run Dask's profiler, which costs the
    per-rank tasks CPU and makes a worker's peak memory vary up to twice what it is without
    (docs/BENCHMARKS.md, "Many ranks on Dask")."""
    try:
        on = client.run(profiling)
    except Exception:  # a worker without this overlapscope: its tasks say so
        return
    if not any(on.values()):
        return
    print(
        f"warning: --dask {address}: {sum(map(bool, on.values()))} of {len(on)} workers run "
        "Dask's statistical profiler, with which a worker's peak memory varied from 1.2x to "
        f"2.25x a rank file's size (1.2x without; docs/BENCHMARKS.md); start them with "
        f"{PROFILE_OFF_ENV}",
        file=sys.stderr,
    )


class LazyClient:
    """Connects on the first :meth:`get`; closes on exit (a context manager)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._stack = contextlib.ExitStack()
        self._client: Client | None = None

    def get(self) -> Client:
        if self._client is None:
            self._client = self._stack.enter_context(connect(self.address))
        return self._client

    def __enter__(self) -> LazyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()


class DaskExecutor:
    """The tasks of an analysis on the Dask cluster at ``address`` (or a new local one for
    ``local``), connected at the first round; closed on exit (a context manager)."""

    where = "on the Dask cluster"

    def __init__(self, address: str) -> None:
        self._client = LazyClient(address)

    def run(
        self,
        fn: Callable[..., Any],
        args: Sequence[tuple[Any, ...]],
        names: Sequence[str],
        stored: Callable[[str], bool],
        *,
        heavy: bool = False,
        progress: str | None = None,
    ) -> dict[str, str]:
        """(``heavy`` and ``progress`` are for local executors: Dask spreads every round
        over its workers, and its own dashboard shows progress.)"""
        return run_tasks(self._client.get(), fn, args, names, stored)

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.__exit__(*exc)


def run_tasks(
    client: Client,
    fn: Callable[..., Any],
    args: Sequence[tuple[Any, ...]],
    names: Sequence[str],
    stored: Callable[[str], bool],
) -> dict[str, str]:
    """``fn(*a)`` for each ``a`` in tasks named ``names``, which store their output in the
    cache (no result travels back: one lost with its worker would be computed again);
    returns {name: why} of the tasks that did not finish or whose output ``stored(name)``
    does not see."""
    futures = client.map(
        _call,
        [fn] * len(args),
        list(args),
        key=[f"overlapscope-{fn.__name__}-{n}" for n in names],
        pure=False,
    )
    by_key = {str(f.key): n for f, n in zip(futures, names, strict=True)}
    failed: dict[str, str] = {}
    for fut in _completed(client, futures, failed, by_key):
        name = by_key[str(fut.key)]
        if fut.status != "finished":
            exc = fut.exception()
            failed[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        elif not stored(name):
            failed[name] = NOT_SHARED
    return failed


def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    fn(*args)


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
