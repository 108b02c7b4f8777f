"""Dashboard test fixtures: sample runs, an isolated analysis cache, headless Chromium."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from dashboards.data import RunSource, discover_runs, read_manifest

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "traces"
DOCS = REPO / "docs"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def pytest_setup_options() -> Any:
    """Chrome options for dash_duo: Debian's chromium, headless, no sandbox (root)."""
    from selenium.webdriver.chrome.options import Options

    options = Options()
    if CHROMIUM:
        options.binary_location = CHROMIUM
    options.add_argument("--headless=new")
    options.add_argument("--no-sandbox")
    options.add_argument("--disable-dev-shm-usage")
    options.add_argument("--window-size=1400,1000")
    return options


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if CHROMIUM and CHROMEDRIVER:
        return
    skip = pytest.mark.skip(reason="chromium/chromedriver not installed (run scripts/setup.sh)")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test uses a private analysis cache, shared within the session."""
    monkeypatch.setenv("OVERLAPSCOPE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="session")
def sample_runs() -> list[RunSource]:
    """The shipped CPU sample sweep (what ``overlapscope dashboard`` opens by default, but the
    GPU runs ``traces/gpu-*``, which test_gpu_runs.py opens)."""
    runs = discover_runs([TRACES]) if TRACES.is_dir() else []
    runs = [r for r in runs if not r.label.startswith("gpu-")]
    assert runs, f"no sample runs under {TRACES}: the dashboard's default needs them"
    return runs


@pytest.fixture(scope="session")
def sweep_runs(sample_runs: list[RunSource]) -> list[RunSource]:
    """The bundled CPU sweep's runs (traces/ also holds GPU runs, of another workload: the
    what-if tests that compare the sweep's configurations take these)."""
    runs = []
    for r in sample_runs:
        m = read_manifest(r.path)
        if m is not None and m.device != "cuda":
            runs.append(r)
    return runs


@pytest.fixture(scope="session")
def sample_run_dir(sample_runs: list[RunSource]) -> Path:
    """One shipped sample run (policy ``none`` when there is one)."""
    for r in sample_runs:
        if r.policy == "none":
            return r.path
    return sample_runs[0].path
