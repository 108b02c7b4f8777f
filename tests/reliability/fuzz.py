"""Seeded fuzz of real inputs: each seed mutates a trace (ours in ``traces/``, the shared
external ones), several ranks of a sample run, or its ``run.json``
(tests/reliability/fuzz_mutations.py), and runs one reader on it: ``analyze``, ``diagnose``,
``whatif`` or the dashboard's data path (by seed). It must end cleanly: exit 0, or exit 2
with one ``overlapscope: error:`` line (the dashboard: its error panel's message); never a
traceback or a MemoryError, never a changed input; and never silently: an input that is not
a valid trace (tests/reliability/fuzz_contract.py) must give an error or a warning the clean
input did not give.

Used by ``tests/reliability/test_fuzz.py`` (a fixed, small set of seeds) and by
``scripts/fuzz_traces.py`` (as many seeds as you like).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import random
import shutil
import traceback
from dataclasses import dataclass
from pathlib import Path

from tests.reliability import fuzz_contract
from tests.reliability.fuzz_mutations import (
    REPO,
    SAMPLE_RUN,
    SAMPLES,
    load_doc,
    mutated_bytes,
    mutated_doc,
    mutated_manifest,
    mutated_run,
    sample_runs,
)

EXTERNAL = REPO.parent / "shared" / "external-traces"
SOURCES = [
    SAMPLES / "none" / "rank-0.pt.trace.json.gz",
    SAMPLES / "backward_pre" / "rank-1.pt.trace.json.gz",
    EXTERNAL / "hta-cpu-only-rank34.json.gz",
    EXTERNAL / "hta-amd-mi250-rank0.json.gz",
    EXTERNAL / "hta-trace-compare-base-rank1.json.gz",
    EXTERNAL / "hta-no-distributed-info.json.gz",
]
COMMANDS = ("analyze", "diagnose", "whatif", "dashboard")
KINDS = {"events": 10, "header": 4, "top": 2, "truncate": 2, "bom": 1, "swap-in": 2,
         "exchange": 1}  # fmt: skip
OK = ("ok", "warning", "error")


def available_sources() -> list[Path]:
    return [p for p in SOURCES if p.is_file()]


@dataclass(frozen=True, slots=True)
class FuzzResult:
    seed: int
    source: str
    mutation: str
    outcome: str  # "ok", "warning", "error" (one line), or what went wrong
    detail: str

    @property
    def clean(self) -> bool:
        return self.outcome in OK


@dataclass(frozen=True, slots=True)
class Case:
    run: Path  # what the reader is given: a run directory, or a trace file
    clean: Path  # the same input unmutated (its warnings are not the mutation's)
    source: str
    mutation: str
    invalid: str | None  # why the input is not a valid trace (None: it is)
    command: str


def digest(path: Path) -> dict[str, str]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def case_kind(seed: int) -> str:
    """The kind of mutation of ``seed`` (the first draw of its generator)."""
    return random.Random(seed).choices(list(KINDS), weights=list(KINDS.values()))[0]


def _trace_case(seed: int, case: Path) -> Case:
    rng = random.Random(seed)
    kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
    command = COMMANDS[seed % len(COMMANDS)]
    run = case / "run"
    if kind in ("swap-in", "exchange"):
        clean = rng.choice(sample_runs())
        shutil.copytree(clean, run)
        return Case(run, clean, clean.name, mutated_run(run, clean, rng, kind), kind, command)
    source = rng.choice(available_sources())
    ours = source.parent.parent == SAMPLES  # one rank of a sample run: the run is given
    clean = source.parent if ours else case / "clean"
    if ours:
        shutil.copytree(clean, run)
    else:
        run.mkdir()
        clean.mkdir()
        shutil.copy(source, clean / source.name)
    doc = load_doc(source)
    if kind in ("truncate", "bom"):
        raw, what = mutated_bytes(json.dumps(doc).encode(), rng, kind)
        invalid = "cut off" if kind == "truncate" else "a byte-order mark"
    else:
        what = mutated_doc(doc, rng, kind)
        raw, invalid = json.dumps(doc).encode(), fuzz_contract.problem(doc)
    (run / source.name).write_bytes(gzip.compress(raw))
    if not ours and command != "whatif":  # another tool's single rank: the file is given
        run, clean = run / source.name, clean / source.name
    return Case(run, clean, source.name, what, invalid, command)


def _manifest_case(seed: int, case: Path) -> Case:
    """A copy of the sample run with a mutated run.json (a field retyped is a one-line
    error; a field deleted may be accepted)."""
    run = case / "run"
    shutil.copytree(SAMPLE_RUN, run)
    doc, what = mutated_manifest(seed)
    (run / "run.json").write_text(json.dumps(doc))
    # odd seeds: whatif (the regression seeds 11, 13, 19 are the what-if's); even: the others
    command = "whatif" if seed % 2 else ("analyze", "diagnose", "dashboard")[seed // 2 % 3]
    return Case(run, SAMPLE_RUN, "run.json", what, None, command)


def _cli(argv: list[str]) -> tuple[int, list[str], str]:
    """(exit status, warning lines, the error line) of ``overlapscope ARGV``."""
    from overlapscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(argv)
    text = out.getvalue() + err.getvalue()
    errors = [ln for ln in err.getvalue().splitlines() if ln.startswith("overlapscope: error:")]
    if code != 0 and not (code == 2 and len(errors) == 1 and "Traceback" not in text):
        raise AssertionError(f"exit {code}: {text[-300:]}")
    warnings = [ln for ln in text.splitlines() if ln.startswith("warning: ")]
    return code, warnings, errors[0] if errors else ""


def _dashboard(run: Path) -> tuple[int, list[str], str]:
    """The dashboard's data path: its registry loads the run, its overview renders it."""
    from dashboards import views
    from dashboards.data import RunRegistry, discover_runs
    from overlapscope.errors import UserError

    try:
        registry = RunRegistry(discover_runs([run]), use_disk_cache=False)
        views.overview_view(registry)
        loaded = registry.load(registry.sources[0].key)
    except UserError as e:
        return 2, [], f"overlapscope: error: {e}"
    return 0, [f"warning: {w}" for w in loaded.analysis.warnings], ""


def read(command: str, run: Path, out: Path) -> tuple[int, list[str], str]:
    """Run one reader on ``run``: (exit status, warnings, error line); the warnings with
    the run's path replaced, so that a mutated copy compares with the clean input."""
    argv = {
        "analyze": ["analyze", str(run), "--no-progress", "--json", str(out)],
        "diagnose": ["diagnose", str(run), "--no-progress"],
        "whatif": ["whatif", str(run), "--policy", "backward_pre", "--json", str(out)],
    }
    code, warnings, error = _dashboard(run) if command == "dashboard" else _cli(argv[command])
    return code, [w.replace(str(run), "RUN") for w in warnings], error


_BASELINES: dict[tuple[str, str], set[str]] = {}


def _baseline(case: Case, out: Path) -> set[str]:
    key = (str(case.clean), case.command)
    if key not in _BASELINES:
        _BASELINES[key] = set(read(case.command, case.clean, out)[1])
    return _BASELINES[key]


def run_case(seed: int, work: Path, *, manifest: bool = False) -> FuzzResult:
    """Mutate an input (picked by ``seed``), or with ``manifest`` the sample run's
    ``run.json``, run the seed's reader on it, classify the ending."""
    case_dir = work / f"seed-{seed}-{'manifest' if manifest else 'trace'}"
    case_dir.mkdir(parents=True)
    case = (_manifest_case if manifest else _trace_case)(seed, case_dir)
    what = f"{case.command}: {case.mutation}"
    before = digest(case.run)
    try:
        code, warnings, error = read(case.command, case.run, case_dir / "out.json")
        new = set(warnings) - _baseline(case, case_dir / "clean.json")
    except MemoryError:
        return FuzzResult(seed, case.source, what, "MemoryError", "")
    except BaseException as e:  # any escape is what this looks for
        tb = traceback.format_exception(e)[-1].strip()
        return FuzzResult(seed, case.source, what, "traceback", tb)
    if digest(case.run) != before:
        return FuzzResult(seed, case.source, what, "input changed", "")
    if code == 2:
        return FuzzResult(seed, case.source, what, "error", error[:200])
    if new:
        return FuzzResult(seed, case.source, what, "warning", sorted(new)[0][:200])
    if case.invalid is not None:
        return FuzzResult(seed, case.source, what, "silent", f"not a valid trace: {case.invalid}")
    return FuzzResult(seed, case.source, what, "ok", "")
