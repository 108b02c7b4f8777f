"""The run registry the browser picks from, and the cached analysis loader.

Run discovery lives in :mod:`dashboards.runs`; its names are re-exported here.

The browser only ever sends a run *key* (``RunSource.key``); keys are assigned here, from the
runs the app was started with, and an unknown key is refused (``UnknownRunError``).

Analysis is computed once per run content and cached twice: in memory, and on disk as a pickle
under ``$OVERLAPSCOPE_CACHE_DIR`` (default ``$XDG_CACHE_HOME/overlapscope`` or
``~/.cache/overlapscope``), in ``dashboard/<key>.pkl``, where the key hashes the analysis
schema version, this module's cache version and each input file's (path, size, mtime). Nothing
is written into run directories.

What-if calibrations (``RunRegistry.calibration``) are kept in memory only, for the
``CALIBRATION_CACHE_SIZE`` runs used last, keyed by the same fingerprint; a run that cannot be
calibrated is remembered too, as its ``CalibrationError``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
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
from overlapscope import analysis as analysis_pkg
from overlapscope import trace as trace_pkg
from overlapscope.analysis.api import SCHEMA_VERSION, RunAnalysis, analyze
from overlapscope.errors import UserError
from overlapscope.manifest import RunManifest
from overlapscope.sim import Calibration
from overlapscope.sim.calibrate import SimInputs, sim_inputs
from overlapscope.sim.predict import calibrate_loaded
from overlapscope.trace.loader import load_run

if TYPE_CHECKING:
    from overlapscope.cluster.run import DaskTarget
    from overlapscope.cluster.timeline import RankTimelines

__all__ = [
    "CalibrationError",
    "LoadedRun",
    "RunLoadError",
    "RunRegistry",
    "RunSource",
    "UnknownRunError",
    "analyse_run",
    "cache_dir",
    "default_pair",
    "discover_runs",
    "fingerprint",
    "read_manifest",
    "workload_fields",
]

# analyze_with_tables' flags of a run opened with --dask: (allow_missing_ranks,
# rank_from_names, align_clocks, timeline)
DASK_FLAGS = (False, False, True, False)
# Bump when what is pickled changes shape.
CACHE_VERSION = 3  # 2: clocks and the critical path; 3: what-if SimInputs cached too
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


@functools.cache
def code_version() -> str:
    """Hash of the loader's and analysis' source files (name, size, mtime): a cached
    analysis from other code is recomputed even where ``SCHEMA_VERSION`` did not change."""
    h = hashlib.sha256()
    for pkg in (analysis_pkg, trace_pkg):
        for f in sorted(Path(pkg.__file__ or "").parent.glob("*.py")):
            st = f.stat()
            h.update(f"{f.name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:16]


def fingerprint(path: Path) -> str:
    """Hash of the analysis schema and code, cache version and each input's (path, size,
    mtime)."""
    h = hashlib.sha256(
        f"{SCHEMA_VERSION}:{CACHE_VERSION}:{code_version()}:{path.resolve()}".encode()
    )
    for f in input_files(path):
        try:
            st = f.stat()
        except OSError as e:
            raise RunLoadError(f"{f}: cannot read ({e.strerror or e})") from e
        h.update(f"\0{f.name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:32]


def cache_dir() -> Path:
    base = os.environ.get("OVERLAPSCOPE_CACHE_DIR")
    if base:
        return Path(base) / "dashboard"
    xdg = os.environ.get("XDG_CACHE_HOME")
    root = Path(xdg) if xdg else Path.home() / ".cache"
    return root / "overlapscope" / "dashboard"


_Cached = tuple[RunAnalysis, RunManifest | None, SimInputs]


def _read_cache(file: Path) -> _Cached | None:
    try:
        with file.open("rb") as fh:
            obj = pickle.load(fh)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError):
        return None
    if not (isinstance(obj, tuple) and len(obj) == 3 and isinstance(obj[0], RunAnalysis)):
        return None
    return obj[0], obj[1], obj[2]


def _write_cache(file: Path, value: _Cached) -> None:
    """Atomic write; a cache that cannot be written only costs a recomputation."""
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=file.parent, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, file)
    except OSError:
        pass
    finally:
        Path(tmp).unlink(missing_ok=True)


def analyse_run(
    path: Path, *, use_disk: bool = True
) -> tuple[RunAnalysis, RunManifest | None, str]:
    """(analysis, run.json, fingerprint) of one run, from the disk cache when it is current."""
    analysis, meta, _, key = _analyse(path, use_disk)
    return analysis, meta, key


def _analyse(path: Path, use_disk: bool) -> tuple[RunAnalysis, RunManifest | None, SimInputs, str]:  # fmt: skip
    """The run parsed once: its analysis, run.json and the what-if calibration's inputs."""
    key = fingerprint(path)
    file = cache_dir() / f"{key}.pkl"
    if use_disk and (hit := _read_cache(file)) is not None:
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
    if use_disk:
        _write_cache(file, (analysis, meta, inputs))
    return analysis, meta, inputs, key


def analyse_on_dask(src: RunSource, target: DaskTarget) -> LoadedRun:
    """The run analysed as ``overlapscope analyze --dask`` does (its summaries cached in
    ``target``'s cache), without its events: they stay in the cache, read per step."""
    from overlapscope.cluster.run import analyze_with_tables
    from overlapscope.cluster.timeline import RankTimelines

    try:
        done = analyze_with_tables([src.path], target, DASK_FLAGS, timeline_files=True)
    except UserError as e:
        raise RunLoadError(str(e)) from e
    except Exception as e:  # a trace that breaks the parser must not take the app down
        raise RunLoadError(f"{src.path}: failed to load: {type(e).__name__}: {e}") from e
    timelines = RankTimelines.of(target.cache().root, done)
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
        dask: DaskTarget | None = None,
    ) -> None:
        self._runs: dict[str, RunSource] = {}
        for r in runs:
            if r.key in self._runs:
                raise ValueError(f"duplicate run key {r.key!r}")
            self._runs[r.key] = r
        self._use_disk = use_disk_cache
        self.dask = dask  # runs analysed on Dask, their events left in its cache
        self._memory: dict[str, tuple[str, LoadedRun]] = {}
        self._calibrations: OrderedDict[str, tuple[str, Calibration | CalibrationError]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()
        self._dask_lock = threading.Lock()

    @property
    def sources(self) -> list[RunSource]:
        return list(self._runs.values())

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
        analysis, meta, inputs, fp = _analyse(src.path, self._use_disk)
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
            loaded = analyse_on_dask(src, self.dask)
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
