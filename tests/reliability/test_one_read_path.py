"""One read path (issue #32, point 1): every command that reads traces reads them through
the loader and its checks, so each damaged-trace class ends the same way in every one of
them: ``analyze``, ``diagnose``, ``whatif``, the dashboard's data path (its run registry,
and the page's overview), ``analyze --dask`` on a real scheduler and worker, and ``analyze
--perfetto`` (which copies the ranks' events into its file). Each class
damages rank 1 of a copy of the shipped sample run."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from overlapscope.cli import main
from overlapscope.errors import UserError
from overlapscope.trace.naming.files import trace_name
from tests.conftest import REPO

SAMPLE = REPO / "traces" / "none"
RANK1 = trace_name(1)


def _doc(run: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress((run / RANK1).read_bytes()))
    return doc


def _save(run: Path, doc: dict[str, Any]) -> None:
    (run / RANK1).write_bytes(gzip.compress(json.dumps(doc).encode()))


def _text(run: Path) -> bytes:
    return gzip.decompress((run / RANK1).read_bytes())


def _first(doc: dict[str, Any], cat: str) -> dict[str, Any]:
    ev: dict[str, Any] = next(e for e in doc["traceEvents"] if e.get("cat") == cat)
    return ev


def _event(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        doc = _doc(run)
        change(_first(doc, "cpu_op"))  # an aten op: the what-if still calibrates without it
        _save(run, doc)

    return damage


def _header(key: str, value: object) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        doc = _doc(run)
        holder, _, field = key.rpartition(".")
        (doc[holder] if holder else doc)[field] = value
        _save(run, doc)

    return damage


def _bytes(change: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        (run / RANK1).write_bytes(gzip.compress(change(_text(run))))

    return damage


def _nan(text: bytes) -> bytes:
    at = text.index(b'"ts":', len(text) // 2)
    end = text.index(b",", at)
    return text[:at] + b'"ts": NaN' + text[end:]


def _copy_over(run: Path) -> None:
    shutil.copy(REPO / "traces" / "backward_pre" / RANK1, run / RANK1)


def _renamed(run: Path) -> None:
    (run / trace_name(0)).rename(run / "tmp")
    (run / RANK1).rename(run / trace_name(0))
    (run / "tmp").rename(run / RANK1)


# class -> (damage, expected outcome, what its one line says)
CLASSES: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "bom": (_bytes(lambda t: b"\xef\xbb\xbf" + t), "warning", "a UTF-8 byte-order mark before the JSON text, skipped"),
    "ts-null": (_event(lambda e: e.update(ts=None)), "warning", "1 event with a missing or non-numeric ts ignored in rank-1"),
    "ts-string": (_event(lambda e: e.update(ts="soon")), "warning", "1 event with a missing or non-numeric ts ignored in rank-1"),
    "ph-deleted": (_event(lambda e: e.pop("ph")), "warning", "1 event with a missing or unknown ph ignored in rank-1"),
    "cat-deleted": (_event(lambda e: e.pop("cat")), "warning", "1 event with a missing or non-string cat ignored"),
    "base-time-string": (_header("baseTimeNanoseconds", "x"), "warning", "baseTimeNanoseconds is a string ('x')"),
    "devices-string": (_header("deviceProperties", "x"), "warning", "deviceProperties is a string"),
    "world_size-string": (_header("distributedInfo.world_size", "2"), "error", "'world_size' is a string ('2')"),
    "world_size-1e308": (_header("distributedInfo.world_size", 1e308), "error", "'world_size' is a number (1e+308)"),
    "truncated": (_bytes(lambda t: t[: len(t) // 2]), "error", "truncated: the file ends at byte"),
    "nan-mid-file": (_bytes(_nan), "error", "invalid JSON at byte"),
    "empty-file": (_bytes(lambda t: b""), "error", "empty file"),
    "foreign-rank": (_copy_over, "error", "recorded at another time, not in this job"),
    "renamed-ranks": (_renamed, "error", "the run's files were renamed"),
}  # fmt: skip


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("damaged")
    runs = {}
    for name, (damage, _, _) in CLASSES.items():
        runs[name] = base / name
        shutil.copytree(SAMPLE, runs[name])
        damage(runs[name])
    return runs


def _cli(*argv: str) -> tuple[str, list[str]]:
    """(outcome, lines): ("error", [the error]) or ("ok"/"warning", the warning lines)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])  # any exception fails the test: a traceback
    text = out.getvalue() + err.getvalue()
    if code != 0:
        errors = [ln for ln in err.getvalue().splitlines() if ln.startswith("overlapscope: error:")]
        assert code == 2 and len(errors) == 1 and "Traceback" not in text, text
        return "error", [errors[0].removeprefix("overlapscope: error: ")]
    warnings = [
        ln.removeprefix("warning: ") for ln in text.splitlines() if ln.startswith("warning: ")
    ]
    return ("warning" if warnings else "ok"), warnings


def _dashboard(run: Path) -> tuple[str, list[str]]:
    """The dashboard's data path: its run registry, and the overview page it renders."""
    from dashboards import views
    from dashboards.data import RunRegistry
    from dashboards.runs import discover_runs

    registry = RunRegistry(discover_runs([run]), use_disk_cache=False)
    (src,) = registry.sources
    page = str(views.overview_view(registry))
    try:
        loaded = registry.load(src.key)
    except UserError as e:
        assert str(e) in page  # the error panel says it
        return "error", [str(e)]
    warnings = list(loaded.analysis.warnings)
    assert all(w in page for w in warnings)  # the warning panel says them
    return ("warning" if warnings else "ok"), warnings


@pytest.fixture(scope="module")
def dask_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("distributed", reason="the cluster extra is not installed (.[cluster])")
    from tests.cluster.conftest import start_dask

    no_profiler = {"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False"}
    procs = start_dask(tmp_path_factory.mktemp("dask"), 1, no_profiler)
    try:
        yield procs.address
    finally:
        procs.close()


@pytest.mark.parametrize("case", list(CLASSES), ids=list(CLASSES))
def test_every_reader_ends_a_damaged_trace_the_same_way(case, damaged, dask_address, tmp_path):
    run = damaged[case]
    _, expected, says = CLASSES[case]
    outcomes = {
        "analyze": _cli("analyze", run),
        "diagnose": _cli("diagnose", run),
        "whatif": _cli("whatif", run, "--policy", "backward_pre"),
        "dashboard": _dashboard(run),
        "dask": _cli("analyze", run, "--dask", dask_address, "--cache", tmp_path / "cache"),
        "perfetto": _cli("analyze", run, "--perfetto", tmp_path / "run.json.gz"),
    }
    for command, (outcome, lines) in outcomes.items():
        assert outcome == expected, (command, lines)
    if expected == "error":  # the same line, word for word
        assert len({lines[0] for _, lines in outcomes.values()}) == 1, outcomes
        assert says in outcomes["analyze"][1][0]
    elif expected == "warning":  # the loader's line, in every one of them
        for command, (_, lines) in outcomes.items():
            assert [w for w in lines if says in w], (command, lines)


# Modules outside overlapscope/trace/ that may touch trace documents, and why: they write
# traces (or copy them for benchmarks), they do not read one for an analysis.
NOT_READERS = {
    "overlapscope/trace/capture.py": "the profiler's own export, before it is written",
    "overlapscope/sim/export.py": "writes the predicted timeline",
    "overlapscope/cluster/synth.py": "re-ranked copies of a run for benchmarks and tests",
    "overlapscope/perfetto/source.py": (
        "copies a rank's events into the Perfetto file after load_run read and checked that "
        "file (its bytes through trace.reader; what the loader leaves out, it leaves out)"
    ),
    "overlapscope/perfetto/export.py": "writes the Perfetto file's traceEvents",
    "overlapscope/perfetto/__init__.py": "names the file's format in its docstring",
}
_TRACE_TOKENS = (
    "traceEvents", "gzip.decompress", "gzip.open", "igzip", "read_trace(", "read_document(",
    "trace.decode import", "trace.reader import",
)  # fmt: skip


def test_no_reader_of_traces_outside_the_loader() -> None:
    """Any future command reads traces through ``load_run`` too: no module but the trace
    package (and the writers above) reads a trace document or calls the decoder."""
    found = []
    for root in ("overlapscope", "dashboards"):
        for path in sorted((REPO / root).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            if rel.startswith("overlapscope/trace/") and rel not in NOT_READERS:
                continue
            text = path.read_text()
            if rel not in NOT_READERS and any(t in text for t in _TRACE_TOKENS):
                found.append(rel)
    assert not found, f"trace readers outside overlapscope/trace (use load_run): {found}"
    for rel in NOT_READERS:
        assert (REPO / rel).is_file(), rel
