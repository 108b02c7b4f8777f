"""A task's memory handed back when it ends: a worker process runs task after task, and what
pyarrow's pool and glibc's arenas keep of one task's peak would lift the next one's."""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator

# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


@contextlib.contextmanager
def released() -> Iterator[None]:
    """Hands the memory a task freed back to the system when it ends: a worker runs task
    after task, and what pyarrow's pool and glibc's arenas keep of one task's peak (~80 MB
    after a 56 MB rank file, measured) would lift the next task's peak by as much.

    Arrow's buffers come from the system allocator, as ``--dask local`` starts its workers
    (``client.WORKER_ENV``): set here too, so that workers started by hand get it without
    the variable in their environment.

    glibc's mmap and trim thresholds are fixed at the maxima its own dynamic thresholds
    rise to in a long-running process (64-bit Linux): the parse's multi-megabyte buffers then
    reuse freed heap memory instead of each mapping fresh pages that fault in anew (~25 ms
    of system CPU on a 56 MB rank, measured; the same peak), and the trim above hands it
    back at the end."""
    import pyarrow

    if pyarrow.default_memory_pool().backend_name != "system":
        pyarrow.set_memory_pool(pyarrow.system_memory_pool())
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024)
        libc.mallopt(_M_TRIM_THRESHOLD, 64 * 1024 * 1024)
    try:
        yield
    finally:
        # No gc.collect(): the tables hold no cycles, and in a worker holding Dask's state a
        # collection cost 20+ ms a task (measured), more than the task on a small rank.
        pyarrow.default_memory_pool().release_unused()
        with contextlib.suppress(OSError, AttributeError):
            _hand_back(ctypes.CDLL("libc.so.6"))


_GLIBC_TRIM_THRESHOLD = 128 * 1024  # glibc's default


def _hand_back(libc: ctypes.CDLL) -> None:
    """Returns the free memory of this thread's malloc arena to the system.

    A Dask worker runs its tasks on a thread of its own, whose glibc arena is not the main
    one: ``malloc_trim`` releases the free chunks inside it but not its free top, which
    glibc shrinks only when a large block is freed into it with the top above the trim
    threshold (fixed high for the task). So the threshold goes back to glibc's default and
    one large block is freed: a worker thread kept ~30 MB more after each task without it
    (measured with the tasks run on a thread, as Dask does)."""
    libc.malloc_trim(0)
    libc.mallopt(_M_TRIM_THRESHOLD, _GLIBC_TRIM_THRESHOLD)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(1024 * 1024))
