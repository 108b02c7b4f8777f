"""Where an analysis' tasks run: an :class:`Executor`. :class:`LocalExecutor` runs them on
this machine (in this process, or a pool of worker processes for a large round);
``overlapscope.cluster.client.DaskExecutor`` on a Dask cluster. Tasks store their output in
the cache and return nothing (``pipeline/tasks.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from overlapscope.pool import local_map


class Executor(Protocol):
    """Runs rounds of tasks; ``where`` says where in messages (``on the Dask cluster``)."""

    where: str

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
        """``fn(*a)`` for each ``a``, in tasks named ``names``; ``{name: why}`` of those that
        did not finish or whose output ``stored(name)`` does not see. ``heavy``: large
        enough for worker processes; ``progress``: a bar's label, where one can be shown."""
        ...


class LocalExecutor:
    """Tasks on this machine: in this process, or (``heavy``) on a pool of worker processes.
    A task's exception is raised here, with its traceback, as the analysis' own would be."""

    where = "locally"

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
        local_map(fn, args, parallel=heavy, progress=progress)
        return {n: "its output is not in the cache" for n in names if not stored(n)}

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
