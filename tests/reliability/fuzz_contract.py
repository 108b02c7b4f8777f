"""What a valid trace is, written out independently of the loader: the fuzz test holds the
loader to it. A mutated trace this module calls invalid must end with an error or a warning
the clean trace did not give; one it calls valid (a key no reader needs deleted, a string
swapped for another string, a duplicated event) may end any clean way. (A byte-order mark
or a cut-off file, which this module never sees as a document, must end with one too.)

The rules are those docs/RELIABILITY.md states: a complete (``X``) event needs ``cat`` and
``name`` strings, a ``tid`` that is an integer or a string, a finite ``ts`` (|ts| <= 1e16 µs)
and ``dur`` (0 <= dur <= 1e12 µs), ``args`` an object where present (with a ``stream`` for GPU
activity); every event a ``ph`` of the trace event format; a ``[memory]`` instant a numeric
``ts`` and an integer ``Total Allocated``; a ``thread_name`` record an integer ``tid`` and a
string ``args.name``; the header fields typed and in range.
"""

from __future__ import annotations

import math
from typing import Any

PHASES = frozenset("XMiBEICbnestfPNODVvRc()")
GPU_ACTIVITY = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
MAX_WORLD = 1 << 20
DEVICE_INTS = ("id", "totalGlobalMem", "computeMajor", "computeMinor", "maxThreadsPerBlock",
               "maxThreadsPerMultiprocessor", "regsPerBlock", "regsPerMultiprocessor",
               "warpSize", "sharedMemPerBlock", "sharedMemPerMultiprocessor", "numSms",
               "sharedMemPerBlockOptin")  # fmt: skip


def _int(v: object, low: int = -(2**63), high: int = 2**63 - 1) -> bool:
    return type(v) is int and low <= v <= high


def _num(v: object) -> bool:
    return type(v) in (int, float) and math.isfinite(float(v))  # type: ignore[arg-type]


def _text(v: object) -> bool:
    return isinstance(v, str) and 0 < len(v) <= 256


def _complete(e: dict[str, Any]) -> str | None:
    if not isinstance(e.get("cat"), str) or not isinstance(e.get("name"), str):
        return "X event: cat and name must be strings"
    if not (_int(e.get("tid")) or isinstance(e.get("tid"), str)):
        return "X event: tid must be an integer or a string"
    ts, dur = e.get("ts"), e.get("dur")
    if not (_num(ts) and abs(float(ts)) <= 1e16):  # type: ignore[arg-type]
        return "X event: ts"
    if not (_num(dur) and 0 <= float(dur) <= 1e12):  # type: ignore[arg-type]
        return "X event: dur"
    if "args" in e and not isinstance(e["args"], dict):
        return "X event: args must be an object"
    if e["cat"].lower() in GPU_ACTIVITY and "stream" not in (e.get("args") or {}):
        return "GPU activity without a stream"
    return None


def event_problem(e: object) -> str | None:
    if not isinstance(e, dict):
        return "an entry of traceEvents is not an object"
    ph = e.get("ph")
    if not isinstance(ph, str) or ph not in PHASES:
        return "ph missing or unknown"
    if ph == "X":
        return _complete(e)
    if ph == "M" and e.get("name") == "thread_name":
        name = e["args"].get("name") if isinstance(e.get("args"), dict) else None
        if not (_int(e.get("tid")) and isinstance(name, str) and name):
            return "thread_name record: tid or args.name"
    if ph == "i" and e.get("name") == "[memory]":
        args = e.get("args")
        total = args.get("Total Allocated") if isinstance(args, dict) else None
        if not (_num(e.get("ts")) and abs(float(e["ts"])) <= 1e16 and _int(total)):
            return "[memory] event: ts or Total Allocated"
    return None


def _distributed(info: object) -> str | None:
    if not isinstance(info, dict):
        return "distributedInfo not an object"
    rank, ws = info.get("rank"), info.get("world_size")
    if not _int(rank, 0, MAX_WORLD - 1):
        return "distributedInfo.rank"
    if "world_size" in info and not (_int(ws, 1, MAX_WORLD) and rank < ws):  # type: ignore[operator]
        return "distributedInfo.world_size"
    if info.get("backend") is not None and not _text(info["backend"]):
        return "distributedInfo.backend"
    if "pg_count" in info and not _int(info["pg_count"], 0, MAX_WORLD):
        return "distributedInfo.pg_count"
    groups = info.get("pg_config")
    if "pg_config" in info and not (
        isinstance(groups, list) and all(isinstance(g, dict) for g in groups)
    ):
        return "distributedInfo.pg_config"
    if info.get("nccl_version") is not None and not _text(info["nccl_version"]):
        return "distributedInfo.nccl_version"
    return None


def _devices(devices: object) -> str | None:
    if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
        return "deviceProperties"
    for d in devices:
        if any(k in d and not _int(d[k], 0) for k in DEVICE_INTS):
            return "deviceProperties field"
        if "name" in d and not _text(d["name"]):
            return "deviceProperties name"
    return None


def header_problem(doc: dict[str, Any]) -> str | None:
    if "distributedInfo" in doc and (p := _distributed(doc["distributedInfo"])):
        return p
    if "baseTimeNanoseconds" in doc and not _int(doc["baseTimeNanoseconds"], 0):
        return "baseTimeNanoseconds"
    if "deviceProperties" in doc and (p := _devices(doc["deviceProperties"])):
        return p
    return None


def problem(doc: object) -> str | None:
    """Why ``doc`` (a decoded trace document) is not a valid trace, or None."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return "no traceEvents list"
    if p := header_problem(doc):
        return p
    for e in doc["traceEvents"]:
        if p := event_problem(e):
            return p
    return None
