"""The one cache: what the CLI, the dashboard and Dask workers keep of an analysis.

Where: ``--cache DIR``, else ``$OVERLAPSCOPE_CACHE``, else ``$XDG_CACHE_HOME/overlapscope``
(``~/.cache/overlapscope``). ``$OVERLAPSCOPE_CACHE_DIR``, the dashboard's variable before,
still works, with a line saying so.

Every entry is keyed by its inputs' identity (each file's resolved path, size and
modification time) and by :func:`code_digest`: a digest of every source file of the installed
package, recursively, and of the trace producers registered at run time. So a changed trace,
another overlapscope (a producer, the simulator, anything) or another producer never serves a
stale entry. A failed parse is cached too (its error), so a re-analysis does not parse a
broken file again.

Every file is sealed (:mod:`overlapscope.sealed`): written under a temporary name, renamed
whole, and checked before it is read. So analyses sharing a cache at once never read a half
file, and a file cut short or changed (a killed writer, a full disk, a bad sector) is found
before any figure comes from it: the entry it belongs to is removed and made again, with a
line saying so (:func:`healing`). A write that fails (a full disk, a read-only folder) is
one error naming the file. Temporary files of writers that were killed are removed when the
cache is next opened.

Layout of ``<cache>``:

* ``<key>.meta.pkl``: what the client needs of a parsed trace file, a few KB
  (:class:`RankMeta`: the loader's view of the file without its events, its categories, its
  collectives' ends for the clock estimate), or its error;
* ``<key>.arrow``: the recognised events, on the file's own clock (lz4 Arrow IPC; read by
  the reduction only, in a task);
* ``<key>.sum-<context>/summary.pkl``: one rank's per-rank figures for one run context (clock
  shift, categories, clock offset); its event-sized figures beside it as ``<name>.arrow``;
* ``path-<run>.pkl`` (and ``path-<run>/step-<n>.pkl``): the critical path of a run;
* ``result-<run>.pkl``: a whole analysis (the files, flags and code it was made from);
* ``dashboard-<run>.pkl``: the dashboard's analysis of a run with its what-if inputs.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from overlapscope.errors import UserError
from overlapscope.sealed import DamagedFile, dump, load, sweep
from overlapscope.table_files import write_events
from overlapscope.trace.producers import registry_digest
from overlapscope.trace.read.parse import NotATraceError, TraceFileError
from overlapscope.trace.run.loader import ParsedRank

CACHE_FORMAT = 5  # 5: every file sealed
# The most damaged files one analysis removes and makes again before it gives up.
MAX_REPAIRS = 64
T = TypeVar("T")
CACHE_ENV = "OVERLAPSCOPE_CACHE"
OLD_CACHE_ENV = "OVERLAPSCOPE_CACHE_DIR"  # the dashboard's, before one cache
PACKAGE = Path(__file__).resolve().parent


def default_cache_dir() -> Path:
    """``$OVERLAPSCOPE_CACHE``, else ``$OVERLAPSCOPE_CACHE_DIR`` (with a deprecation line),
    else the user cache (``$XDG_CACHE_HOME`` or ``~/.cache``) ``/overlapscope``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    if os.environ.get(OLD_CACHE_ENV):
        _deprecated_once(os.environ[OLD_CACHE_ENV])
        return Path(os.environ[OLD_CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "overlapscope"


@functools.cache
def _deprecated_once(value: str) -> None:
    print(
        f"warning: {OLD_CACHE_ENV} is deprecated and will be removed; set {CACHE_ENV} instead "
        f"(using {value})",
        file=sys.stderr,
    )


@functools.cache
def package_digest() -> str:
    """:func:`source_digest` of the installed package (once per process)."""
    return source_digest(PACKAGE)


def source_digest(root: Path) -> str:
    """Digest of every ``*.py`` file under ``root``, recursively: their paths relative to it
    and their bytes."""
    h = hashlib.sha256(str(CACHE_FORMAT).encode())
    for src in sorted(root.rglob("*.py")):
        h.update(f"\0{src.relative_to(root).as_posix()}\0".encode())
        h.update(src.read_bytes())
    return h.hexdigest()[:16]


def code_digest() -> str:
    """What every entry's key names of the code: the package and the producers registered
    at run time."""
    return f"{package_digest()}-{registry_digest()}"


def file_identity(path: Path) -> str:
    """A file as the keys name it: resolved path, size, modification time."""
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"


def entry_key(path: Path, world_hint: int) -> str:
    """The key of a trace file's parse: the file, the world hint and the code."""
    ident = f"{file_identity(path)}|{world_hint}|{code_digest()}"
    return f"{path.name[:40]}-{hashlib.sha256(ident.encode()).hexdigest()[:24]}"


@dataclass(frozen=True, slots=True)
class RankMeta:
    """A parsed rank file as the client sees it: no event rows.

    ``parsed``: the loader's parse result with ``table.events`` empty but of the file's
    dtypes (its categories are the file's). ``clock_rows``: the file's communication rows
    with a sequence number and its first row (own clock, no rank column): what the clock
    estimate reads. ``num_events``, ``has_gpu``: of the whole table."""

    parsed: ParsedRank
    clock_rows: pd.DataFrame
    num_events: int
    has_gpu: bool


@dataclass(frozen=True, slots=True)
class Cache:
    """A cache directory (see the module docstring)."""

    root: Path

    def prepare(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            writable = os.access(self.root, os.W_OK)
        except OSError as e:
            raise UserError(
                f"{self.root}: cannot create the cache directory ({e.strerror}); "
                "pass --cache DIR with a writable directory"
            ) from e
        if not writable:
            raise UserError(f"{self.root}: cache directory not writable; pass --cache DIR")
        sweep([self.root, *(p for p in self.root.iterdir() if p.is_dir())])

    def meta_path(self, key: str) -> Path:
        return self.root / f"{key}.meta.pkl"

    def events_path(self, key: str) -> Path:
        return self.root / f"{key}.arrow"

    def has(self, key: str) -> bool:
        return self.meta_path(key).is_file()

    def write(self, key: str, result: RankMeta | TraceFileError, events: pd.DataFrame) -> None:
        """Store one parse result (the events first, then the meta that marks it whole)."""
        if isinstance(result, RankMeta):
            write_events(self.events_path(key), events.reset_index(drop=True))
            dump(self.meta_path(key), result)
        else:
            error = (isinstance(result, NotATraceError), str(result.path), result.problem)
            dump(self.meta_path(key), error)

    def read(self, key: str, path: Path) -> RankMeta | TraceFileError:
        """The cached result of ``path`` (named as this analysis names it);
        :class:`~overlapscope.sealed.DamagedFile` when its meta is not whole."""
        loaded = load(self.meta_path(key))
        if isinstance(loaded, RankMeta):
            raw = dataclasses.replace(loaded.parsed.raw, path=path)
            renamed = ParsedRank(raw, loaded.parsed.table)
            return RankMeta(renamed, loaded.clock_rows, loaded.num_events, loaded.has_gpu)
        not_a_trace, _, problem = loaded
        cls = NotATraceError if not_a_trace else TraceFileError
        return cls(path, str(problem))

    def entry(self, kind: str, token: str) -> Path:
        """Where a whole-run entry of ``kind`` (``result``, ``path``, ``dashboard``) lies."""
        return self.root / f"{kind}-{token}.pkl"

    def discard(self, damaged: Path) -> None:
        """Remove the entry a damaged file belongs to, so that it is made again: a folder
        under the root whole (a rank's figures, a run's path steps); a parse's events and
        meta together; else the file."""
        try:
            top = self.root / damaged.resolve().relative_to(self.root.resolve()).parts[0]
        except ValueError:  # (not in this cache: nothing of ours to remove)
            return
        if top.is_dir():
            shutil.rmtree(top, ignore_errors=True)
            return
        for suffix in (".meta.pkl", ".arrow"):
            if top.name.endswith(suffix):
                key = top.name[: -len(suffix)]
                self.meta_path(key).unlink(missing_ok=True)
                self.events_path(key).unlink(missing_ok=True)
                return
        top.unlink(missing_ok=True)

    def remake(self, damaged: DamagedFile) -> None:
        """:meth:`discard` the damaged file's entry, with the line that says so."""
        self.discard(damaged.path)
        _remade(damaged)


def healing(cache: Cache, work: Callable[[], T]) -> T:
    """``work()``; where it meets a damaged cache file, the file's entry removed (with a
    line saying so) and ``work()`` again, which makes it again from its inputs. A file
    damaged again once made again, or more than ``MAX_REPAIRS`` of them, is one error."""
    seen: set[Path] = set()
    while True:
        try:
            return work()
        except DamagedFile as e:
            if e.path in seen or len(seen) >= MAX_REPAIRS:
                raise UserError(
                    f"{e}; made again, it is still damaged: check the disk under {cache.root}, "
                    "or pass --no-cache"
                ) from e
            seen.add(e.path)
            cache.remake(e)


def read_entry(path: Path) -> Any | None:
    """A pickled entry, or None where there is none or it is not whole (made again, with a
    line saying so)."""
    try:
        return load(path)
    except DamagedFile as e:
        if path.is_file():
            _remade(e)
        return None
    except OSError:
        return None


def _remade(damaged: DamagedFile) -> None:
    print(
        f"warning: {damaged.path}: a damaged cache file ({damaged.why}); made again",
        file=sys.stderr,
    )


def write_entry(path: Path, value: object) -> None:
    dump(path, value)
