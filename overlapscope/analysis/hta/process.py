"""HTA in a process of its own.

HTA 0.5.0 parses several ranks in a ``fork`` pool (``Trace.parse_multiple_ranks``). Forked
from the caller, its workers inherit whatever the caller holds: a Dask client's IO-loop and
offload threads, signal handlers, locks taken by threads that do not exist in the copy. Such
a worker can sit forever on a queue's lock while the caller joins it (seen in the suite). So
HTA never runs in the caller: :func:`hta_figures` starts a fresh interpreter (``subprocess``,
no fork of the caller's state, no re-import of the caller's ``__main__``) that runs HTA and
hands its figures back through a pickle in a private temporary folder. HTA's own fork pool
then forks that clean process, whose only thread is its main one.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

# The longest HTA may take before it is stopped and reported as failed (HTA parses with
# json.loads and row-wise pandas: a 472 MB trace took 46 s, so this bounds only a hang).
HTA_TIMEOUT_S = 1800.0

_CHILD = (
    "import sys; sys.path[:0] = {path!r}; "
    "from overlapscope.analysis.hta.process import _child_main; _child_main()"
)


def hta_figures(
    files: dict[int, str],
    trace_dir: str,
    include_last_profiler_step: bool,
    *,
    timeout_s: float = HTA_TIMEOUT_S,
) -> dict[str, Any]:
    """HTA's overlap, temporal breakdown, idle split and counted steps of ``files`` (rank ->
    trace path), computed in a fresh interpreter. The result holds ``error`` (one line) when
    HTA failed, crashed or ran past ``timeout_s``; else ``overlap`` (rank -> %), ``temporal``
    and ``idle`` (DataFrames or None) and ``steps`` (rank -> step numbers)."""
    with tempfile.TemporaryDirectory(prefix="overlapscope-hta-") as tmp:
        request = Path(tmp, "request.json")
        result = Path(tmp, "result.pkl")
        request.write_text(
            json.dumps(
                {
                    "files": {str(k): v for k, v in files.items()},
                    "trace_dir": trace_dir,
                    "include_last_profiler_step": include_last_profiler_step,
                    "result": str(result),
                }
            )
        )
        cmd = [sys.executable, "-c", _CHILD.format(path=list(sys.path)), str(request)]
        try:
            proc = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"error": f"failed: HTA did not finish in {timeout_s:g} s (stopped)"}
        if not result.exists():
            last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            return {"error": f"failed: HTA's process ended without figures: {last[:300]}"}
        with result.open("rb") as f:
            out: dict[str, Any] = pickle.load(f)  # (written just now by our own child)
        return out


def _child_main() -> None:
    """The child's side: run HTA on the request named by ``argv[1]``, pickle what it gave
    (or its one-line error) to the request's ``result`` path."""
    import contextlib
    import io
    import logging

    request = json.loads(Path(sys.argv[1]).read_text())
    files = {int(k): v for k, v in request["files"].items()}
    logging.getLogger("hta").setLevel(logging.ERROR)
    out: dict[str, Any]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            out = _run(files, request["trace_dir"], request["include_last_profiler_step"])
    except Exception as e:  # HTA is third-party: any failure becomes a status, not a crash
        out = {"error": f"failed: {type(e).__name__}: {e}"}
    tmp = request["result"] + ".part"
    with open(tmp, "wb") as f:
        pickle.dump(out, f)
    os.replace(tmp, request["result"])


def _run(files: dict[int, str], trace_dir: str, include_last: bool) -> dict[str, Any]:
    from hta.trace_analysis import TraceAnalysis

    ta = TraceAnalysis(
        trace_files=files, trace_dir=trace_dir, include_last_profiler_step=include_last
    )
    overlap = ta.get_comm_comp_overlap(visualize=False)
    return {
        "overlap": {
            int(r): float(v)
            for r, v in zip(overlap["rank"], overlap["comp_comm_overlap_pctg"], strict=False)
        },
        "temporal": _temporal(ta),
        "idle": _idle(ta, sorted(files)),
        "steps": {int(r): [int(s) for s in ta.t.get_iterations(r)] for r in files},
    }


def _temporal(ta: Any) -> pd.DataFrame | None:
    try:
        df = ta.get_temporal_breakdown(visualize=False)
    except Exception:
        return None
    keep = [
        c
        for c in (
            "rank",
            "idle_time(us)",
            "compute_time(us)",
            "non_compute_time(us)",
            "kernel_time(us)",
        )
        if c in df.columns
    ]
    out = df[keep].rename(columns=lambda c: c.replace("(us)", "_us"))
    return out.astype({c: float for c in out.columns if c != "rank"})


def _idle(ta: Any, ranks: list[int]) -> pd.DataFrame | None:
    """HTA's idle-time breakdown of each rank (HTA's own result names no rank: one call
    per rank, the rank added): ``rank, stream, idle_category, idle_time_us, ...``."""
    frames = []
    for rank in ranks:
        try:
            res = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
        except Exception:
            return None
        df = res[0] if isinstance(res, tuple) else res
        if not isinstance(df, pd.DataFrame):
            return None
        frames.append(df.rename(columns={"idle_time": "idle_time_us"}).assign(rank=rank))
    if not frames:
        return None
    out = pd.concat(frames, ignore_index=True)
    return out[["rank", *[c for c in out.columns if c != "rank"]]]
