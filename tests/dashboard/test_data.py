"""Run discovery, the run registry (keys only) and the analysis cache, on real sample runs."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from dashboards import data, views
from dashboards.data import (
    RunLoadError,
    RunRegistry,
    RunSource,
    UnknownRunError,
    analyse_run,
    default_pair,
    discover_runs,
    fingerprint,
)
from overlapscope.cache import Cache, default_cache_dir
from overlapscope.errors import UserError


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("logs"))
    return dst


def test_discovery_finds_nested_runs_with_unique_keys(sample_run_dir: Path, tmp_path: Path) -> None:
    _copy(sample_run_dir, tmp_path / "sweep" / "a b")
    _copy(sample_run_dir, tmp_path / "other" / "a b")
    runs = discover_runs([tmp_path])
    assert [r.label for r in runs] == ["other/a b", "sweep/a b"]
    assert [r.key for r in runs] == ["other-a-b", "sweep-a-b"]
    assert all(r.path.is_absolute() for r in runs)
    # A run directory given directly is one run labelled by its name.
    (single,) = discover_runs([tmp_path / "sweep" / "a b"])
    assert single.label == "a b"


def test_discovery_refuses_missing_and_empty_paths(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="nope: no such run directory"):
        discover_runs([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no run found"):
        discover_runs([tmp_path / "empty"])


def test_default_pair_is_serial_vs_pipelined(sample_runs: list[RunSource]) -> None:
    a, b = default_pair(sample_runs)
    by_key = {r.key: r for r in sample_runs}
    assert by_key[str(a)].policy == "none"
    assert by_key[str(b)].policy == "backward_pre"
    p = Path("/x")
    assert default_pair([RunSource("k", p, "k", None)]) == ("k", None)
    assert default_pair([]) == (None, None)


def test_default_pair_compares_policies_of_one_workload(
    sample_runs: list[RunSource], tmp_path: Path
) -> None:
    # As scripts/demo.sh opens it: a fresh run of another model listed before the samples.
    other = tmp_path / "quickstart"
    shutil.copytree(next(r.path for r in sample_runs if r.policy == "backward_pre"), other)
    meta = json.loads((other / "run.json").read_text())
    meta["config"]["model"]["dim"] = 192  # a valid model: 6 heads divide it
    meta["config"]["link_gbit"] = None
    (other / "run.json").write_text(json.dumps(meta))
    runs = [*discover_runs([other]), *sample_runs]
    by_key = {r.key: r for r in runs}
    a, b = default_pair(runs)
    assert (by_key[str(a)].policy, by_key[str(b)].policy) == ("none", "backward_pre")
    assert by_key[str(b)].path != other.resolve()
    # The picker adds the configuration only where the run's name does not say it.
    labels = {views.picker_label(r) for r in runs}
    assert {"quickstart (backward_pre)", "backward_pre+limit=2", "none"} <= labels


@pytest.mark.parametrize(
    "key", ["/etc/passwd", "../traces/none", "none/../..", "", None, 3, ["none"]]
)
def test_registry_refuses_keys_it_was_not_started_with(
    sample_runs: list[RunSource], key: object
) -> None:
    registry = RunRegistry(sample_runs)
    with pytest.raises(UnknownRunError, match="unknown run"):
        registry.load(key)


def test_analysis_is_cached_on_disk_and_keyed_by_the_traces(
    sample_run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _copy(sample_run_dir, tmp_path / "run")
    cache = Cache(default_cache_dir())
    first, meta, key = analyse_run(run, cache)
    assert cache.entry(data.ENTRY_KIND, key).is_file()
    assert not any(p.name.startswith(".") for p in run.iterdir())  # nothing written beside

    def no_loading(*_: object, **__: object) -> None:
        raise AssertionError("the trace was parsed again")

    monkeypatch.setattr(data, "analyse", no_loading)
    again, meta2, key2 = analyse_run(run, cache)
    assert key2 == key and meta2 == meta
    pd.testing.assert_frame_equal(again.ranks, first.ranks)
    assert again.findings == first.findings

    # Touching a trace changes the key: the stale entry is not used.
    trace = next(run.glob("*.json.gz"))
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert fingerprint(run) != key
    with pytest.raises(RunLoadError, match="parsed again"):
        analyse_run(run, cache)


def test_registry_keeps_a_loaded_run_in_memory_until_it_changes(
    sample_run_dir: Path, tmp_path: Path
) -> None:
    run = _copy(sample_run_dir, tmp_path / "run")
    registry = RunRegistry(discover_runs([run]))
    first = registry.load("run")
    assert registry.load("run") is first
    (run / "run.json").touch()
    os.utime(run / "run.json", ns=(0, 10**18))
    assert registry.load("run") is not first


def test_vanished_or_broken_run_is_an_error_panel(sample_run_dir: Path, tmp_path: Path) -> None:
    run = _copy(sample_run_dir, tmp_path / "gone")
    broken = _copy(sample_run_dir, tmp_path / "broken")
    for trace in broken.glob("*.json.gz"):
        trace.write_bytes(trace.read_bytes()[:200])  # truncated
    registry = RunRegistry(discover_runs([tmp_path]))
    registry.load("gone")
    shutil.rmtree(run)
    with pytest.raises(RunLoadError, match="no longer exists"):
        registry.load("gone")
    with pytest.raises(RunLoadError, match="broken"):
        registry.load("broken")
    for tab in ("overview", "timeline", "units", "tradeoff", "ranks"):
        out = views.render_view(registry, tab, "gone", "broken", 2)
        panels = [c for c in out if getattr(c, "className", None) == "error-panel"]
        assert panels, tab
