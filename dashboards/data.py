"""The run registry the browser picks from, and the cached analysis loader.

Run discovery lives in :mod:`dashboards.runs`; its names are re-exported here.

The browser only ever sends a run *key* (``RunSource.key``); keys are assigned here, from the
runs the app was started with, and an unknown key is refused (``UnknownRunError``).

Analysis is computed once per run content and cached twice: in memory, and on disk in the one
cache (:mod:`overlapscope.cache`: ``--cache DIR``, ``$OVERLAPSCOPE_CACHE`` or
``~/.cache/overlapscope``) as ``dashboard-<key>.pkl``, where the key hashes the analysis
schema version, this module's cache version, the installed package's code and each input
file's (path, size, mtime). Nothing is written into run directories. A run opened with
``--dask`` is analysed as ``analyze --dask`` does, through the same cache.

What-if calibrations (``RunRegistry.calibration``) are kept in memory only, for the
``CALIBRATION_CACHE_SIZE`` runs used last, keyed by the same fingerprint; a run that cannot be
calibrated is remembered too, as its ``CalibrationError``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dashboards.runs import (
    RUN_JSON,
    RunSource,
    default_pair,
    discover_runs,
    read_manifest,
    workload_fields,
)
from overlapscope.analysis.api import SCHEMA_VERSION, RunAnalysis, analyze
from overlapscope.analysis.findings.registry import registry_digest as findings_digest
from overlapscope.cache import Cache, code_digest, read_entry, write_entry
from overlapscope.errors import UserError
from overlapscope.manifest import RunManifest
from overlapscope.pipeline.run import Target, opened
from overlapscope.sim import Calibration
from overlapscope.sim.calibrate import SimInputs, sim_inputs
from overlapscope.sim.predict import calibrate_loaded
from overlapscope.trace.loader import load_run

if TYPE_CHECKING:
    from overlapscope.pipeline.timeline import RankTimelines

__all__ = [
    "CalibrationError",
    "LoadedRun",
    "RunLoadError",
    "RunRegistry",
    "RunSource",
    "UnknownRunError",
    "analyse_run",
    "default_pair",
    "discover_runs",
    "fingerprint",
    "read_manifest",
    "workload_fields",
]

# Bump when what is pickled changes shape.
# 2: clocks and the critical path; 3: what-if SimInputs; 4: one cache; 5: a GPU run's
# launches; 6: 5 with run.json's trace stamps (issue 32); 7: 6 with where the GPU waits
# (issue 30) and the Perfetto export's rank infos (issue 35)
CACHE_VERSION = 7
# What-if calibrations kept in memory (a few MB each: per-step compute and transfer tables).
CALIBRATION_CACHE_SIZE = 8


class UnknownRunError(UserError):
    """The browser asked for a run key the app was not started with."""


class RunLoadError(UserError):
    """A run directory disappeared or its traces failed to load."""


class CalibrationError(UserError):
    """The what-if model cannot be calibrated from this run (no run.json, no overlapscope
    ranges, a prediction rather than a measurement, ...)."""


@dataclass(frozen=True, slots=True)
class LoadedRun:
    """``timelines``: None when ``analysis.timeline`` holds every drawable event; for a run
    opened with ``--dask``, where each rank's events lie in the cache (its timeline is read
    a step and a few ranks at a time; ``analysis.timeline`` is empty)."""

    source: RunSource
    analysis: RunAnalysis
    manifest: RunManifest | None
    sim_inputs: SimInputs | None = None  # what the what-if calibration takes beside analysis
    timelines: RankTimelines | None = None


def input_files(path: Path) -> list[Path]:
    """The files whose content the analysis of ``path`` depends on (for the cache key)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise RunLoadError(f"{path}: the run directory no longer exists")
    manifest = read_manifest(path)
    if manifest is not None and manifest.traces:
        files = [path / name for name in manifest.traces]
    else:
        files = sorted(
            p
            for p in path.iterdir()
            if p.name != RUN_JSON and p.name.endswith((".json", ".json.gz"))
        )
    if (path / RUN_JSON).is_file():
        files.append(path / RUN_JSON)
    return files


def fingerprint(path: Path) -> str:
    """Hash of the analysis schema, this cache's version, the code, the findings registered
    beyond the built-in ones, and each input's (path, size, mtime)."""
    h = hashlib.sha256(
        f"{SCHEMA_VERSION}:{CACHE_VERSION}:{code_digest()}:{findings_digest()}:"
        f"{path.resolve()}".encode()
    )
    for f in input_files(path):
        try:
            st = f.stat()
        except OSError as e:
            raise RunLoadError(f"{f}: cannot read ({e.strerror or e})") from e
        h.update(f"\0{f.name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:32]


_Cached = tuple[RunAnalysis, RunManifest | None, SimInputs]


def _read_cache(file: Path) -> _Cached | None:
    obj = read_entry(file)
    if not (isinstance(obj, tuple) and len(obj) == 3 and isinstance(obj[0], RunAnalysis)):
        return None
    return obj[0], obj[1], obj[2]


def _write_cache(file: Path, value: _Cached) -> None:
    """A cache that cannot be written only costs a recomputation."""
    with contextlib.suppress(OSError):
        write_entry(file, value)


def analyse_run(path: Path, cache: Cache | None) -> tuple[RunAnalysis, RunManifest | None, str]:
    """(analysis, run.json, fingerprint) of one run, from ``cache`` when it holds it
    (None: no disk cache)."""
    analysis, meta, _, key = _analyse(path, cache)
    return analysis, meta, key


def _analyse(path: Path, cache: Cache | None) -> tuple[RunAnalysis, RunManifest | None, SimInputs, str]:  # fmt: skip
    """The run parsed once: its analysis, run.json and the what-if calibration's inputs."""
    key = fingerprint(path)
    file = cache.entry("dashboard", key) if cache is not None else None
    if file is not None and (hit := _read_cache(file)) is not None:
        return hit[0], hit[1], hit[2], key
    try:
        run = load_run(path, progress=False)
        analysis = analyze(run)
        inputs = sim_inputs(run)
    except UserError as e:
        raise RunLoadError(str(e)) from e
    except Exception as e:  # a trace that breaks the parser must not take the app down
        raise RunLoadError(f"{path}: failed to load: {type(e).__name__}: {e}") from e
    meta = run.manifest
    if file is not None:
        _write_cache(file, (analysis, meta, inputs))
    return analysis, meta, inputs, key


def analyse_on_dask(src: RunSource, target: Target, cache: Cache) -> LoadedRun:
    """The run analysed as ``overlapscope analyze --dask`` does (its figures cached in
    ``cache``), without its events: they stay in the cache, read per step."""
    from overlapscope.pipeline.plan import Inputs
    from overlapscope.pipeline.run import analyze_stored
    from overlapscope.pipeline.timeline import RankTimelines

    try:
        done = analyze_stored(Inputs((src.path,)), target, cache, timeline_files=True)
    except UserError as e:
        raise RunLoadError(str(e)) from e
    except Exception as e:  # a trace that breaks the parser must not take the app down
        raise RunLoadError(f"{src.path}: failed to load: {type(e).__name__}: {e}") from e
    timelines = RankTimelines.of(cache.root, done)
    manifest = read_manifest(src.path) if src.path.is_dir() else None
    return LoadedRun(src, done.analysis, manifest, timelines=timelines)


def calibrate_run(src: RunSource, loaded: LoadedRun) -> Calibration:
    """The what-if calibration of one run from its cached analysis (the run is parsed once);
    ``CalibrationError`` says why not and what to do."""
    manifest = read_manifest(src.path) if src.path.is_dir() else None
    predicted = manifest.predicted if manifest else None
    if predicted is not None:
        origin = Path(predicted.source)
        raise CalibrationError(
            f"{src.label} is a what-if prediction (from {origin.name or 'another run'}), "
            "not a measurement: pick the measured run it was predicted from"
        )
    if loaded.sim_inputs is None:
        raise CalibrationError(
            f"{src.label} was opened with --dask: the dashboard holds its summaries, not the "
            "events the what-if replays; open it without --dask for the what-if"
        )
    try:
        return calibrate_loaded(loaded.analysis, loaded.sim_inputs)
    except UserError as e:
        # the simulator's messages start with the path: name the run as the page does
        message = str(e).removeprefix(f"{src.path}: ")
        raise CalibrationError(f"{src.label}: {message}") from e
    except Exception as e:  # a run the model does not expect must not take the app down
        raise CalibrationError(
            f"{src.label}: the what-if model cannot calibrate this run "
            f"({type(e).__name__}: {e}); record it with `overlapscope run`"
        ) from e


class RunRegistry:
    """The runs the app was started with, by key; loads each through the cache."""

    def __init__(
        self,
        runs: Iterable[RunSource],
        *,
        use_disk_cache: bool = True,
        target: Target | None = None,
    ) -> None:
        """``target``: with ``dask`` set, runs are analysed on Dask (``analyze --dask``), their
        events left in the cache; its cache (``--cache``, ``--no-cache``) is the registry's,
        open while it lives. ``use_disk_cache=False``: a temporary one for Dask, none else."""
        self._runs: dict[str, RunSource] = {}
        for r in runs:
            if r.key in self._runs:
                raise ValueError(f"duplicate run key {r.key!r}")
            self._runs[r.key] = r
        target = target or Target()
        self.dask = target if target.dask is not None else None
        if not use_disk_cache:
            target = dataclasses.replace(target, no_cache=True)
        self._cache_stack = contextlib.ExitStack()  # (its temporary cache, if any: till exit)
        self._cache: Cache | None = None
        if self.dask is not None or not target.no_cache:
            self._cache = self._cache_stack.enter_context(opened(target))
        self._memory: dict[str, tuple[str, LoadedRun]] = {}
        self._calibrations: OrderedDict[str, tuple[str, Calibration | CalibrationError]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()
        self._dask_lock = threading.Lock()

    @property
    def sources(self) -> list[RunSource]:
        return list(self._runs.values())

    @property
    def cache(self) -> Cache | None:
        """Where the runs' analyses are kept (a run opened with --dask: its figures)."""
        return self._cache

    def source(self, key: object) -> RunSource:
        if not isinstance(key, str) or key not in self._runs:
            raise UnknownRunError(f"unknown run {str(key)[:80]!r}: pick one of the listed runs")
        return self._runs[key]

    def load(self, key: object) -> LoadedRun:
        """The analysed run; ``UnknownRunError`` / ``RunLoadError`` for the error panel."""
        src = self.source(key)
        fp = fingerprint(src.path)
        with self._lock:
            hit = self._memory.get(src.key)
            if hit is not None and hit[0] == fp:
                return hit[1]
        if self.dask is not None:
            return self._load_on_dask(src, fp)
        analysis, meta, inputs, fp = _analyse(src.path, self._cache)
        loaded = LoadedRun(source=src, analysis=analysis, manifest=meta, sim_inputs=inputs)
        with self._lock:
            self._memory[src.key] = (fp, loaded)
        return loaded

    def _load_on_dask(self, src: RunSource, fp: str) -> LoadedRun:
        """One analysis at a time: the page's first callbacks ask for a run together, and
        each would otherwise start its own tasks (with ``local``, its own cluster)."""
        assert self.dask is not None
        with self._dask_lock:
            with self._lock:
                hit = self._memory.get(src.key)
            if hit is not None and hit[0] == fp:
                return hit[1]
            assert self._cache is not None  # (a Dask registry always has one)
            loaded = analyse_on_dask(src, self.dask, self._cache)
            with self._lock:
                self._memory[src.key] = (fp, loaded)
            return loaded

    def calibration(self, key: object) -> Calibration:
        """The run's what-if calibration, from memory while its files are unchanged (LRU of
        ``CALIBRATION_CACHE_SIZE`` runs); ``CalibrationError`` (also remembered) when the
        model cannot be calibrated from it."""
        src = self.source(key)
        fp = fingerprint(src.path)
        with self._lock:
            hit = self._calibrations.get(src.key)
            if hit is not None and hit[0] == fp:
                self._calibrations.move_to_end(src.key)
                result = hit[1]
            else:
                result = None
        if result is None:
            try:
                result = calibrate_run(src, self.load(key))
            except (CalibrationError, RunLoadError) as e:
                result = CalibrationError(str(e))
            with self._lock:
                self._calibrations[src.key] = (fp, result)
                self._calibrations.move_to_end(src.key)
                while len(self._calibrations) > CALIBRATION_CACHE_SIZE:
                    self._calibrations.popitem(last=False)
        if isinstance(result, CalibrationError):
            raise CalibrationError(str(result))  # a fresh one: the stored one keeps no traceback
        return result
