"""Build small Kineto traces by hand for known-answer tests."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson

TRAIN_TID = 1
GLOO_TID = 99
BASE_NS = 1_700_000_000_000_000_000


def x(
    name: str,
    ts: float,
    dur: float,
    tid: int = TRAIN_TID,
    cat: str = "user_annotation",
    args: dict[str, Any] | None = None,
    pid: int = 10,
) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
    }
    if args is not None:
        ev["args"] = args
    return ev


def step(n: int, ts: float, dur: float) -> dict[str, Any]:
    return x(f"ProfilerStep#{n}", ts, dur)


def gloo(op: str, ts: float, dur: float, numel: int, tid: int = GLOO_TID) -> dict[str, Any]:
    return x(
        f"gloo:{op}", ts, dur, tid=tid, args={"Input type": ["float"], "Input Dims": [[numel]]}
    )


def launch(ts: float, correlation: int, tid: int = TRAIN_TID) -> dict[str, Any]:
    return x(
        "cudaLaunchKernel", ts, 1.0, tid=tid, cat="cuda_runtime", args={"correlation": correlation}
    )


def kernel(
    name: str,
    ts: float,
    dur: float,
    correlation: int,
    stream: int = 7,
    cat: str = "kernel",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    args = {"stream": stream, "correlation": correlation, "device": 0, **(extra or {})}
    return x(name, ts, dur, tid=stream, cat=cat, args=args, pid=0)


def thread_name(tid: int, name: str) -> dict[str, Any]:
    return {
        "ph": "M",
        "name": "thread_name",
        "pid": 10,
        "tid": tid,
        "args": {"name": f"thread {tid} ({name})"},
    }


def trace(
    rank: int | None,
    world: int,
    events: list[dict[str, Any]],
    base_ns: int | None = BASE_NS,
    backend: str = "gloo",
) -> dict[str, Any]:
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    if rank is not None:
        doc["distributedInfo"] = {"backend": backend, "rank": rank, "world_size": world}
    if base_ns is not None:
        doc["baseTimeNanoseconds"] = base_ns
    return doc


def write(path: Path, doc: dict[str, Any]) -> Path:
    data = orjson.dumps(doc)
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path
