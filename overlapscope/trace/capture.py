"""Capture: a torch.profiler schedule per rank and atomic trace/manifest files.

Each rank writes ``rank-<K>.pt.trace.json.gz`` (Kineto JSON from ``export_chrome_trace``,
with ``distributedInfo`` and ``baseTimeNanoseconds``, readable by HTA and Perfetto). Every
file is written to ``<name>.partial`` and renamed when complete, so a rank that dies leaves
no file that looks complete; ``run.json`` is written last by rank 0, once every rank is done.
"""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from io import BufferedIOBase
from pathlib import Path

import orjson
import torch
from torch.profiler import ProfilerActivity, profile, schedule

from overlapscope.config import ProfileWindow
from overlapscope.trace.naming.files import RUN_STAMP_KEY, trace_name

__all__ = [
    "ProfileWindow",
    "RankProfiler",
    "trace_name",
]


def peak_memory_from_trace(trace_json: Path) -> int:
    """Peak ``Total Allocated`` of the profiler's ``[memory]`` events (CPU runs), bytes."""
    doc = orjson.loads(trace_json.read_bytes())
    peak = 0
    for ev in doc.get("traceEvents", ()):
        if ev.get("name") == "[memory]":
            peak = max(peak, int(ev.get("args", {}).get("Total Allocated", 0)))
    return peak


def stamp_header(src: BufferedIOBase, dst: BufferedIOBase, stamp: dict[str, object]) -> None:
    """Copy the exported document's opening brace and put the run stamp after it as its
    first key; the rest of ``src`` is copied after it unchanged."""
    head = src.read(1 << 16)
    brace = head.find(b"{")
    if brace < 0:
        raise ValueError("the profiler's export is not a JSON object")
    dst.write(head[: brace + 1])
    dst.write(orjson.dumps({RUN_STAMP_KEY: stamp})[1:-1] + b",")
    dst.write(head[brace + 1 :])


class RankProfiler:
    """Profiles one rank's active window and writes its gzipped trace atomically."""

    def __init__(
        self,
        out_dir: Path | str,
        rank: int,
        window: ProfileWindow,
        cuda: bool,
        run_id: str | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.rank = rank
        self.run_id = run_id  # stamped into the trace's header (trace.files.RUN_STAMP_KEY)
        self.cuda = cuda
        self.peak_mem_bytes = 0
        self._aborted = False
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        self.profiler = profile(
            activities=activities,
            schedule=schedule(
                wait=window.wait, warmup=window.warmup, active=window.active, repeat=1
            ),
            on_trace_ready=self._on_ready,
            record_shapes=True,
            profile_memory=True,
            with_stack=False,
        )

    def _on_ready(self, prof: profile) -> None:
        if self._aborted:
            return  # the rank failed mid-window: write no trace that would look complete
        final = self.out_dir / trace_name(self.rank)
        with tempfile.TemporaryDirectory(dir=self.out_dir) as tmp:
            raw = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(raw))
            if not self.cuda:
                self.peak_mem_bytes = peak_memory_from_trace(raw)
            part = final.with_name(final.name + ".partial")
            with raw.open("rb") as src, gzip.open(part, "wb", compresslevel=6) as dst:
                if self.run_id is not None:
                    stamp_header(src, dst, {"run_id": self.run_id, "rank": self.rank})
                shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(part, final)

    def __enter__(self) -> RankProfiler:
        self.profiler.__enter__()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._aborted = exc_type is not None
        self.profiler.__exit__(None, None, None)

    def step(self) -> None:
        self.profiler.step()


def versions() -> dict[str, str]:
    import platform

    import overlapscope

    v = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "overlapscope": overlapscope.__version__,
    }
    if torch.cuda.is_available():
        v["cuda"] = str(torch.version.cuda)
        v["gpu"] = torch.cuda.get_device_name()
    return v
