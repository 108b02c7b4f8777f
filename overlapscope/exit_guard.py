"""A stopped server exits: :func:`arm` bounds the interpreter's own shutdown.

After the dashboard stops serving (Ctrl-C, SIGTERM), what is left is Python's exit: it joins
every non-daemon thread and runs the ``atexit`` hooks of the libraries loaded (Dask's among
them with ``--dask``). Twice in the suite under load, a ``--dask local`` dashboard had not
exited 30 s, then 120 s, after SIGTERM, and the cause was not found: never when run alone.
A process that a supervisor or a test stopped must end, so once serving is over a daemon
thread waits ``grace_s``; if the process is still alive then, it says so in one line, dumps
every thread's stack to stderr (what held it, for the next report) and exits with the
command's code.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time

SHUTDOWN_GRACE_S = 30.0


def _expire(code: int, grace_s: float, what: str) -> None:
    time.sleep(grace_s)
    held = [t.name for t in threading.enumerate() if not t.daemon and t.is_alive()]
    print(
        f"warning: {what} had not exited {grace_s:g} s after stopping (threads still running: "
        f"{', '.join(held) or 'none'}; their stacks follow); exiting now",
        file=sys.stderr,
        flush=True,
    )
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(code)


def arm(code: int, what: str, grace_s: float = SHUTDOWN_GRACE_S) -> None:
    """Exit with ``code`` if the process is still alive ``grace_s`` from now."""
    threading.Thread(
        target=_expire, args=(code, grace_s, what), name="overlapscope-exit-guard", daemon=True
    ).start()
