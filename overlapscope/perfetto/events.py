"""The trace-event vocabulary of the export: who is which process and thread, flow ids, and
the records themselves (Chrome's JSON trace event format, which Perfetto reads too).

Ids are unique across the whole file, not per process: Perfetto's JSON importer keys a
thread by its tid and re-homes it when the same tid turns up under another pid, and flow ids
are matched across processes. So::

    pid of rank r            r + 1                         (0 is the kernel's in Perfetto)
    pid of the run           RUN_PID                       (findings of the whole run)
    tid of rank r's track k  (r + 1) * TID_STRIDE + k      k < ADDED: a thread or stream of
                                                           its source trace; k >= ADDED:
                                                           overlapscope's tracks
    flow id of rank r        (r + 1) * FLOW_STRIDE + n     its source's flows and async ids
    path flow id             PATH_FLOW_BASE + n            the critical path's arrows

All stay below 2**53 (a JSON number any viewer reads exactly) for every rank below
``MAX_WORLD_SIZE`` (2**20).
"""

from __future__ import annotations

from typing import Any

import orjson

from overlapscope.errors import UserError

TID_STRIDE = 1 << 16
ADDED = 1 << 15  # first track index of overlapscope's tracks
FLOW_STRIDE = 1 << 31
PATH_FLOW_BASE = 1 << 52
RUN_PID = (1 << 31) - 1
# What the export's tracks are called in the viewer (before the rank's own threads).
PREFIX = "overlapscope · "
CATEGORY = "overlapscope"
# Chrome's reserved colour names (Perfetto picks its own colours).
COLOUR = {
    "exposed": "terrible",
    "peer": "bad",
    "idle": "grey",
    "path": "black",
    "finding": "yellow",
}


def rank_pid(rank: int) -> int:
    return rank + 1


def track_tid(rank: int, index: int) -> int:
    """The tid of the rank's ``index``-th track (see the module doc)."""
    if not 0 <= index < TID_STRIDE:
        raise UserError(
            f"rank {rank}: more than {ADDED} threads and streams in its trace; the export "
            "cannot number them"
        )
    return rank_pid(rank) * TID_STRIDE + index


def flow_id(rank: int, n: int) -> int:
    if n >= FLOW_STRIDE:
        raise UserError(f"rank {rank}: more than {FLOW_STRIDE} flows in its trace")
    return rank_pid(rank) * FLOW_STRIDE + n


def dumps(event: dict[str, Any]) -> bytes:
    """One event as one line of the file (its comma and newline added by the writer)."""
    return orjson.dumps(event, option=orjson.OPT_SERIALIZE_NUMPY)


def metadata(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    """A metadata event (no ``ts``: it has no time, and a viewer would stretch the
    timeline to 0 for it); a process's own are given ``tid == pid`` (a tid of that
    process only, as Linux numbers a process's main thread)."""
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def complete(
    name: str, pid: int, tid: int, ts: float, dur: float, args: dict[str, Any], colour: str
) -> dict[str, Any]:
    return {
        "ph": "X",
        "name": name,
        "cat": CATEGORY,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "cname": COLOUR[colour],
        "args": args,
    }


def instant(name: str, pid: int, tid: int, ts: float, args: dict[str, Any]) -> dict[str, Any]:
    """A thread-scoped instant (a marker on that track)."""
    return {
        "ph": "i",
        "s": "t",
        "name": name,
        "cat": CATEGORY,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "cname": COLOUR["finding"],
        "args": args,
    }


def flow_end(ph: str, flow: int, pid: int, tid: int, ts: float) -> dict[str, Any]:
    """One end of a flow arrow (``ph`` ``s``: its start, bound to the slice enclosing ``ts``
    on that thread; ``f``: its finish, bound to the enclosing slice too: ``bp: e``)."""
    event: dict[str, Any] = {
        "ph": ph,
        "id": flow,
        "name": "critical path",
        "cat": f"{CATEGORY}.path",
        "pid": pid,
        "tid": tid,
        "ts": ts,
    }
    if ph == "f":
        event["bp"] = "e"
    return event


def thread_names(
    pid: int, tid: int, name: str, sort_index: int, extra: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """A track's name and its place among the process's tracks."""
    return [
        metadata("thread_name", pid, tid, {"name": name, **(extra or {})}),
        metadata("thread_sort_index", pid, tid, {"sort_index": sort_index}),
    ]
