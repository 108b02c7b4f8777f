"""Fixtures of the clock-alignment and critical-path tests: real runs made once per session,
and a builder of small event tables with a known answer."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from overlapscope.trace.run.loader import RunTraces
from overlapscope.trace.schema import EVENT_COLUMNS

TESTS = Path(__file__).resolve().parents[1]
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


def on_separate_hosts(run: RunTraces) -> RunTraces:
    """The run as if each rank had run on its own host (its run.json naming one host per
    rank): what injected clock offsets simulate. A run on one host keeps its clock unless an
    offset is far beyond end-time noise (overlapscope/analysis/clocks/alignment.py::align_run)."""
    if run.manifest is None:
        return run
    hosts = tuple(f"host-{r.rank}" for r in run.ranks)
    return dataclasses.replace(run, manifest=dataclasses.replace(run.manifest, hosts=hosts))


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


def pytest_setup_options() -> Any:
    """Chrome options for dash_duo (as tests/dashboard/conftest.py: same hook, same options,
    so either file may answer when both are collected)."""
    from selenium.webdriver.chrome.options import Options

    options = Options()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:
        options.binary_location = chromium
    options.add_argument("--headless=new")
    options.add_argument("--no-sandbox")
    options.add_argument("--disable-dev-shm-usage")
    options.add_argument("--window-size=1400,1000")
    return options
