"""The what-if calibration cache of the dashboard's run registry: a calibration is kept until
the run changes, a failure is remembered, and a run's traces are parsed once for both its
analysis and its calibration. (Moved from tests/dashboard/test_whatif.py.)
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from dashboards.data import CalibrationError, RunRegistry, discover_runs


def test_calibration_is_cached_until_the_run_changes(sample_run_dir: Path, tmp_path: Path) -> None:
    run = shutil.copytree(sample_run_dir, tmp_path / "run", ignore=shutil.ignore_patterns("logs"))
    registry = RunRegistry(discover_runs([run]), use_disk_cache=False)
    first = registry.calibration("run")
    assert registry.calibration("run") is first
    os.utime(run / "run.json", ns=(0, 10**18))
    assert registry.calibration("run") is not first
    # A failure is remembered and raised afresh.
    (run / "run.json").unlink()
    for _ in range(2):
        with pytest.raises(CalibrationError, match=r"no run\.json"):
            registry.calibration("run")


def test_a_run_is_parsed_once_for_its_analysis_and_its_calibration(
    sample_run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The calibration takes the registry's (cached) analysis: the traces are loaded once
    # whichever the page asks for first.
    # (every consumer loads through the one entry point's in-process executor)
    pipeline_run = importlib.import_module("overlapscope.pipeline.run")

    loads: list[Path] = []
    real = pipeline_run.load_run

    def counting(path: Path, **kw: Any) -> Any:
        loads.append(path)
        return real(path, **kw)

    monkeypatch.setattr(pipeline_run, "load_run", counting)
    for first in ("calibration", "load"):
        loads.clear()
        registry = RunRegistry(discover_runs([sample_run_dir]), use_disk_cache=False)
        key = registry.sources[0].key
        if first == "calibration":
            registry.calibration(key)
            registry.load(key)
        else:
            registry.load(key)
            registry.calibration(key)
        assert len(loads) == 1, first
