"""A trace file's header fields, typed once: ``distributedInfo``, ``baseTimeNanoseconds``,
``deviceProperties`` and overlapscope's run stamp (``overlapscopeRun``).

A field the analysis cannot do without (the rank, the world size, the run stamp) that has
the wrong type or is out of range stops the file with one line naming the field, its value
and the fix; a field it can do without (the backend, the base time, the device properties,
torch's process-group listing) is left out with one warning line each, counted with the
file's other warnings by the loader. A field that is absent is not a problem: traces from
other tools lack some of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from overlapscope.trace.naming.files import RUN_STAMP_KEY
from overlapscope.trace.read.decode import TraceFileError

MAX_WORLD_SIZE = 1 << 20  # a larger rank or world size is a corrupt field, not a run
MAX_BASE_TIME_NS = 2**63 - 1  # int64 nanoseconds since 1970: until the year 2262
MAX_TEXT = 256  # a longer backend or device name is a corrupt field
RUN_ID_RE = re.compile(r"^[0-9a-f]{8,64}$")
# deviceProperties entries: the fields Kineto writes that are counts or sizes.
_DEVICE_INTS = (
    "id", "totalGlobalMem", "computeMajor", "computeMinor", "maxThreadsPerBlock",
    "maxThreadsPerMultiprocessor", "regsPerBlock", "regsPerMultiprocessor", "warpSize",
    "sharedMemPerBlock", "sharedMemPerMultiprocessor", "numSms", "sharedMemPerBlockOptin",
)  # fmt: skip
_REEXPORT = "the trace is corrupt: re-export it"


@dataclass(frozen=True, slots=True)
class RunStamp:
    """What ``overlapscope run`` writes into each trace: the run's id and the rank."""

    run_id: str
    rank: int


@dataclass(frozen=True, slots=True)
class Header:
    rank: int | None  # None: no distributedInfo
    world_size: int | None
    backend: str | None
    base_time_ns: int | None
    stamp: RunStamp | None
    warnings: tuple[str, ...]  # fields left out, one line each
    # distributedInfo.pg_config: the process groups this rank belongs to (trace/groups/assign.py)
    groups: tuple[PgEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class PgEntry:
    """One entry of ``distributedInfo.pg_config``: a process group the rank is in."""

    name: str  # pg_name (c10d's id of the group: "0", "1", ...)
    desc: str  # pg_desc ("default_pg", "mesh_shard", ...; "" when absent)
    ranks: tuple[int, ...]  # its global ranks


def shown(value: object) -> str:
    """A value as a message quotes it: its JSON type and at most 40 characters of it."""
    kind = {
        bool: "a boolean", int: "an integer", float: "a number", str: "a string",
        list: "a list", dict: "an object", type(None): "null",
    }.get(type(value), type(value).__name__)  # fmt: skip
    if value is None:
        return kind
    text = repr(value)
    if len(text) > 40:
        size = f", {len(value):,} long" if isinstance(value, (str, list, dict)) else ""
        text = f"{text[:37]}...{size}"
    return f"{kind} ({text})"


def _is_int(v: object) -> TypeGuard[int]:
    return type(v) is int


def _world(path: Path, info: dict[str, Any]) -> tuple[int, int | None]:
    rank, given = info.get("rank"), info.get("world_size")
    if not _is_int(rank):
        raise TraceFileError(
            path,
            f"distributedInfo has no integer 'rank' (it is {shown(rank)}); not a torch trace, "
            f"or {_REEXPORT}",
        )
    ws: int | None = None
    if _is_int(given):
        ws = given
    elif "world_size" in info:
        raise TraceFileError(
            path,
            f"distributedInfo field 'world_size' is {shown(given)}, not an integer; {_REEXPORT}",
        )
    if not 0 <= rank < (ws if ws is not None else MAX_WORLD_SIZE) or not (
        ws is None or 1 <= ws <= MAX_WORLD_SIZE
    ):
        raise TraceFileError(
            path,
            f"distributedInfo field 'rank' {rank} / 'world_size' {ws} out of range "
            f"(0 <= rank < world_size <= {MAX_WORLD_SIZE}); {_REEXPORT}",
        )
    return rank, ws


def _text(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_TEXT


def _pg_entries(groups: list[dict[str, Any]]) -> tuple[PgEntry, ...]:
    """The usable entries of ``pg_config`` (a name, integer ranks; others are left out)."""
    out = []
    for g in groups:
        name, desc, ranks = g.get("pg_name"), g.get("pg_desc", ""), g.get("ranks")
        if not (isinstance(name, (str, int)) and isinstance(ranks, list)):
            continue
        if not all(_is_int(r) and 0 <= r < MAX_WORLD_SIZE for r in ranks):
            continue
        text = desc if isinstance(desc, str) and len(desc) <= MAX_TEXT else ""
        out.append(PgEntry(str(name), text, tuple(sorted(set(ranks)))))
    return tuple(out)


def _distributed(
    path: Path, obj: dict[str, Any], warn: list[str]
) -> tuple[int | None, int | None, str | None, tuple[PgEntry, ...]]:
    if "distributedInfo" not in obj:
        return None, None, None, ()
    info = obj["distributedInfo"]
    if not isinstance(info, dict):
        raise TraceFileError(path, f"distributedInfo is {shown(info)}, not an object; {_REEXPORT}")
    rank, ws = _world(path, info)
    backend = info.get("backend")
    if backend is not None and not _text(backend):
        warn.append(f"distributedInfo field 'backend' is {shown(backend)}: left out")
        backend = None
    pg_count = info.get("pg_count")
    if "pg_count" in info and not (_is_int(pg_count) and 0 <= pg_count <= MAX_WORLD_SIZE):
        warn.append(f"distributedInfo field 'pg_count' is {shown(pg_count)}: left out")
    groups = info.get("pg_config")
    if "pg_config" in info and not (
        isinstance(groups, list) and all(isinstance(g, dict) for g in groups)
    ):
        warn.append(f"distributedInfo field 'pg_config' is {shown(groups)}, not a list of objects: left out")  # fmt: skip
        groups = []
    version = info.get("nccl_version")
    if version is not None and not _text(version):
        warn.append(f"distributedInfo field 'nccl_version' is {shown(version)}: left out")
    return rank, ws, backend, _pg_entries(groups or [])


def _base_time(obj: dict[str, Any], warn: list[str]) -> int | None:
    if "baseTimeNanoseconds" not in obj:
        return None
    base = obj["baseTimeNanoseconds"]
    if _is_int(base) and 0 <= base <= MAX_BASE_TIME_NS:
        return int(base)
    warn.append(
        f"baseTimeNanoseconds is {shown(base)}, not a count of nanoseconds since 1970: left "
        "out (this rank's times are its own, not placed on the other ranks' clock)"
    )
    return None


def _device_problem(devices: object) -> str | None:
    if not isinstance(devices, list):
        return f"is {shown(devices)}, not a list"
    for i, d in enumerate(devices):
        if not isinstance(d, dict):
            return f"entry {i} is {shown(d)}, not an object"
        for key in _DEVICE_INTS:
            if key in d and not (_is_int(d[key]) and d[key] >= 0):
                return f"entry {i} field '{key}' is {shown(d[key])}"
        if "name" in d and not _text(d["name"]):
            return f"entry {i} field 'name' is {shown(d['name'])}"
    return None


def _stamp(path: Path, obj: dict[str, Any]) -> RunStamp | None:
    if RUN_STAMP_KEY not in obj:
        return None
    stamp = obj[RUN_STAMP_KEY]
    if not isinstance(stamp, dict):
        raise TraceFileError(
            path,
            f"{RUN_STAMP_KEY} is {shown(stamp)}, not an object; the trace is damaged: copy it "
            "again from its run",
        )
    run_id, rank = stamp.get("run_id"), stamp.get("rank")
    if not (isinstance(run_id, str) and RUN_ID_RE.match(run_id)):
        raise TraceFileError(
            path,
            f"{RUN_STAMP_KEY} field 'run_id' is {shown(run_id)}, not a run id; the trace is "
            "damaged: copy it again from its run",
        )
    if not (_is_int(rank) and 0 <= rank < MAX_WORLD_SIZE):
        raise TraceFileError(
            path,
            f"{RUN_STAMP_KEY} field 'rank' is {shown(rank)}, not a rank; the trace is damaged: "
            "copy it again from its run",
        )
    return RunStamp(run_id, int(rank))


def read_header(path: Path, obj: dict[str, Any]) -> Header:
    """The typed header of one trace (``obj``: its top-level fields); raises
    :class:`TraceFileError` for a field the analysis cannot do without."""
    warn: list[str] = []
    rank, ws, backend, groups = _distributed(path, obj, warn)
    base = _base_time(obj, warn)
    if "deviceProperties" in obj and (problem := _device_problem(obj["deviceProperties"])):
        warn.append(f"deviceProperties {problem}: left out")
    stamp = _stamp(path, obj)
    if stamp is not None and rank is not None and stamp.rank != rank:
        raise TraceFileError(
            path,
            f"{RUN_STAMP_KEY} says rank {stamp.rank}, distributedInfo rank {rank}; the trace "
            "is damaged: copy it again from its run",
        )
    return Header(rank, ws, backend, base, stamp, tuple(warn), groups)
