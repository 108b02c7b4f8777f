"""Fixtures of the clock-alignment and critical-path tests: real runs made once per session,
and a builder of small event tables with a known answer."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from overlapscope.trace.loader import RunTraces
from overlapscope.trace.schema import EVENT_COLUMNS

TESTS = Path(__file__).resolve().parents[1]
FSDP_SCRIPT = TESTS / "trace" / "torch_fsdp_run.py"
TINY_4_RANKS = [
    "--nproc",
    "4",
    "--model",
    "mlp",
    "--layers",
    "2",
    "--dim",
    "64",
    "--global-batch",
    "8",
    "--steps",
    "4",
]


@pytest.fixture(scope="session")
def four_rank_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny real 4-rank run of ours (torchrun, gloo, one host)."""
    out = tmp_path_factory.mktemp("clocks") / "r4"
    cmd = [sys.executable, "-m", "overlapscope", "run", *TINY_4_RANKS, "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="session")
def fsdp2_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny real torch FSDP2 run (2 gloo ranks, one host)."""
    out = tmp_path_factory.mktemp("clocks") / "fsdp2"
    cmd = [sys.executable, str(FSDP_SCRIPT), "fsdp2", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=240)
    return out


def inject(run: RunTraces, shifts: dict[int, tuple[float, float]]) -> RunTraces:
    """Move whole ranks' clocks: rank -> (offset_us, drift_ppm), the drift about time 0."""
    ev = run.events
    rank = ev["rank"].to_numpy()
    shift = np.zeros(len(ev))
    for r, (offset, ppm) in shifts.items():
        mine = rank == r
        shift[mine] = offset + ppm * 1e-6 * ev["ts_us"].to_numpy()[mine]
    moved = ev.assign(ts_us=ev["ts_us"] + shift, end_us=ev["end_us"] + shift)
    return dataclasses.replace(run, events=moved)


def table(rows: list[dict[str, object]]) -> pd.DataFrame:
    """An event table from short rows: ``rank, step, lane, ts, dur`` and optional ``unit,
    phase, kind, group, seq``."""
    records = []
    for r in rows:
        ts, dur = float(r["ts"]), float(r["dur"])  # type: ignore[arg-type]
        records.append(
            {
                "rank": r["rank"],
                "step": r.get("step", 0),
                "tid": 1,
                "stream": -1,
                "on_gpu": False,
                "cat": "user_annotation",
                "name": f"{r['lane']}/{r.get('unit', '')}",
                "ts_us": ts,
                "dur_us": dur,
                "end_us": ts + dur,
                "lane": r["lane"],
                "phase": r.get("phase"),
                "unit": r.get("unit"),
                "kind": r.get("kind"),
                "bytes": -1,
                "group": r.get("group"),
                "seq": r.get("seq", -1),
                "correlation": -1,
            }
        )
    return pd.DataFrame.from_records(records, columns=list(EVENT_COLUMNS)).astype(EVENT_COLUMNS)
