"""The run registry the browser picks from, and the cached analysis loader.

Run discovery lives in :mod:`dashboards.runs`; its names are re-exported here.

The browser only ever sends a run *key* (``RunSource.key``); keys are assigned here, from the
runs the app was started with, and an unknown key is refused (``UnknownRunError``).

Every run is analysed by the one entry point (:func:`overlapscope.pipeline.run.analyse`): in
this process (the what-if replays the run's events), or, opened with ``--dask``, as
``analyze --dask`` does. The analysis is computed once per run content and cached twice: in
memory, and on disk in the one cache (:mod:`overlapscope.cache`: ``--cache DIR``,
``$OVERLAPSCOPE_CACHE`` or ``~/.cache/overlapscope``) as ``dashboard-v<version>-<key>.pkl``,
where the key is the analysis key of every analysis
(:func:`~overlapscope.pipeline.run.analysis_key`: the code, the flags, each input's path,
size and mtime). Nothing is written into run directories.

What-if calibrations (``RunRegistry.calibration``) are kept in memory only, for the
``CALIBRATION_CACHE_SIZE`` runs used last, keyed by the same fingerprint; a run that cannot be
calibrated is remembered too, as its ``CalibrationError``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dashboards.runs import (
    RunSource,
    default_pair,
    discover_runs,
    read_manifest,
    workload_fields,
)
from overlapscope.analysis.api import RunAnalysis
from overlapscope.cache import Cache, read_entry, write_entry
from overlapscope.errors import UserError
from overlapscope.manifest import RunManifest
from overlapscope.pipeline.plan import Inputs
from overlapscope.pipeline.run import (
    IN_PROCESS,
    StoredAnalysis,
    Target,
    analyse,
    analysis_key,
    opened,
)
from overlapscope.sim import Calibration
from overlapscope.sim.inputs import SimInputs, sim_inputs
from overlapscope.sim.predict import calibrate_loaded

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
# The kind of the dashboard's entry (analysis, run.json, what-if inputs) under the analysis key.
ENTRY_KIND = f"dashboard-v{CACHE_VERSION}"
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


def run_inputs(path: Path) -> Inputs:
    """What the dashboard analyses of a run: its path, the analysis' default flags."""
    return Inputs((path,), progress=False)


def fingerprint(path: Path) -> str:
    """The run's analysis key: the one key of a whole analysis
    (:func:`~overlapscope.pipeline.run.analysis_key`: the code, the findings registered, the
    flags, each input's path, size and mtime), for the timeline gathered whole."""
    if not path.exists():
        raise RunLoadError(f"{path}: the run directory no longer exists")
    return analysis_key(run_inputs(path), timeline=True, on_demand=True)


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
    file = cache.entry(ENTRY_KIND, key) if cache is not None else None
    if file is not None and (hit := _read_cache(file)) is not None:
        return hit[0], hit[1], hit[2], key
    done = _analysed(path, IN_PROCESS, None)
    assert done.run is not None  # (the in-process executor keeps the run)
    try:
        inputs = sim_inputs(done.run)
    except Exception as e:  # a run the simulator does not expect must not take the app down
        raise RunLoadError(f"{path}: failed to load: {type(e).__name__}: {e}") from e
    meta = done.run.manifest
    if file is not None:
        _write_cache(file, (done.analysis, meta, inputs))
    return done.analysis, meta, inputs, key


def _analysed(path: Path, target: Target, cache: Cache | None, **want: bool) -> StoredAnalysis:
    """The run from the one entry point (:func:`~overlapscope.pipeline.run.analyse`); a
    :class:`RunLoadError` for whatever stops it (a trace that breaks the parser must not take
    the app down)."""
    try:
        return analyse(run_inputs(path), target, cache, **want)
    except UserError as e:
        raise RunLoadError(str(e)) from e
    except Exception as e:
        raise RunLoadError(f"{path}: failed to load: {type(e).__name__}: {e}") from e


def analyse_on_dask(src: RunSource, target: Target, cache: Cache) -> LoadedRun:
    """The run analysed as ``overlapscope analyze --dask`` does (its figures cached in
    ``cache``), without its events: they stay in the cache, read per step."""
    from overlapscope.pipeline.timeline import RankTimelines

    done = _analysed(src.path, target, cache, timeline_files=True)
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
