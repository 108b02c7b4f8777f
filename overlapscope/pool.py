"""Work run on this machine: in this process, or on a pool of worker processes when it is
large enough to pay for starting them (one worker per two CPUs: decoding is memory-bound,
and two decoders sharing a core's hyperthreads are no faster than one, measured on a 2-vCPU
machine), with a progress bar on a terminal for long rounds."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from typing import Any, TypeVar

R = TypeVar("R")

# Below this many bytes of input in all, working in this process beats starting workers.
PARALLEL_MIN_BYTES = 16 * 1024 * 1024
PROGRESS_MIN_BYTES = 64 * 1024 * 1024


def num_workers() -> int:
    return (os.cpu_count() or 1) // 2


def show_progress(asked: bool | None, total_bytes: int) -> bool:
    """``asked``, or (None) a large round on a terminal."""
    return asked if asked is not None else total_bytes >= PROGRESS_MIN_BYTES and sys.stderr.isatty()


def local_map(
    fn: Callable[..., R],
    args: Sequence[tuple[Any, ...]],
    *,
    parallel: bool,
    progress: str | None = None,
) -> list[R]:
    """``[fn(*a) for a in args]``, in worker processes when ``parallel`` (and there are two
    tasks and two workers); ``progress``: a bar with this label on stderr. A task's
    exception is raised here."""
    workers = min(len(args), num_workers())
    results: list[R] = []
    with ExitStack() as stack:
        advance: Callable[[], None] = lambda: None  # noqa: E731
        if progress is not None:
            advance = _progress_bar(stack, progress, len(args))
        if parallel and workers > 1:
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=workers))
            for fut in [pool.submit(fn, *a) for a in args]:
                results.append(fut.result())
                advance()
        else:
            for a in args:
                results.append(fn(*a))
                advance()
    return results


def _progress_bar(stack: ExitStack, label: str, total: int) -> Callable[[], None]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    prog = stack.enter_context(
        Progress(
            TextColumn(label),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} files"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
    )
    task = prog.add_task(label, total=total)
    return lambda: prog.advance(task)
