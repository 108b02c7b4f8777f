"""Seeded mutations of real traces (ours in ``traces/``, the shared external ones) and the
check that ``overlapscope analyze`` ends cleanly on each: exit 0 (warning where it left
something out) or exit 2 with one ``overlapscope: error:`` line; never a traceback, never a
MemoryError, never a changed input file.

Used by ``tests/reliability/test_fuzz.py`` (a fixed, small set of seeds) and by
``scripts/fuzz_traces.py`` (as many seeds as you like).
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import hashlib
import io
import json
import random
import shutil
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SAMPLE_RUN = REPO / "traces" / "none"
EXTERNAL = REPO.parent / "shared" / "external-traces"
SOURCES = [
    REPO / "traces" / "none" / "rank-0.pt.trace.json.gz",
    EXTERNAL / "hta-cpu-only-rank34.json.gz",
    EXTERNAL / "hta-amd-mi250-rank0.json.gz",
    EXTERNAL / "hta-trace-compare-base-rank1.json.gz",
    EXTERNAL / "hta-no-distributed-info.json.gz",
]
_ODD_VALUES: list[Any] = [None, "", "x", -1, 0, 1e308, -1e308, [], {}, True, 2**70, "1e3"]


def available_sources() -> list[Path]:
    return [p for p in SOURCES if p.is_file()]


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    return doc


def _mutate_events(doc: dict[str, Any], rng: random.Random) -> str:
    events = doc.get("traceEvents", [])
    if not events:
        return "no events"
    what = []
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(events))
        ev = events[i]
        if not isinstance(ev, dict) or not ev:
            continue
        key = rng.choice(sorted(ev))
        op = rng.choice(["delete", "retype", "duplicate", "swap"])
        if op == "delete":
            del ev[key]
        elif op == "retype":
            ev[key] = rng.choice(_ODD_VALUES)
        elif op == "duplicate":
            events.insert(i, copy.deepcopy(ev))
        else:
            other = rng.choice(sorted(ev))
            ev[key], ev[other] = ev[other], ev[key]
        what.append(f"{op} {key} of event {i}")
    return "; ".join(what)


def _mutate_top(doc: dict[str, Any], rng: random.Random) -> str:
    key = rng.choice(sorted(doc))
    if rng.random() < 0.5:
        del doc[key]
        return f"delete top-level {key}"
    doc[key] = rng.choice(_ODD_VALUES)
    return f"retype top-level {key}"


def mutated_trace(source: Path, seed: int) -> tuple[bytes, str]:
    """The bytes of a mutated copy of ``source`` (gzipped JSON) and what was done."""
    rng = random.Random(seed)
    doc = _load(source)
    kind = rng.choices(["events", "top", "truncate", "bom"], weights=[14, 3, 2, 1])[0]
    if kind == "events":
        what = _mutate_events(doc, rng)
    elif kind == "top":
        what = _mutate_top(doc, rng)
    raw = json.dumps(doc).encode()
    if kind == "truncate":  # a trace cut off by a full disk
        cut = rng.randrange(len(raw))
        return gzip.compress(raw[:cut]), f"truncated at byte {cut} of {len(raw)}"
    if kind == "bom":
        return gzip.compress(b"\xef\xbb\xbf" + raw), "UTF-8 BOM"
    return gzip.compress(raw), what


@dataclass(frozen=True, slots=True)
class FuzzResult:
    seed: int
    source: str
    mutation: str
    outcome: str  # "ok", "error" (one line), or what went wrong
    detail: str

    @property
    def clean(self) -> bool:
        return self.outcome in ("ok", "error")


def digest(path: Path) -> dict[str, str]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def mutated_manifest(seed: int) -> tuple[dict[str, Any], str]:
    """``traces/none/run.json`` with one to three fields (top level or one below) deleted
    or retyped."""
    rng = random.Random(seed)
    doc: dict[str, Any] = json.loads((SAMPLE_RUN / "run.json").read_text())
    what = []
    for _ in range(rng.randint(1, 3)):
        holder = doc
        key = rng.choice(sorted(holder))
        if isinstance(holder[key], dict) and holder[key] and rng.random() < 0.5:
            holder = holder[key]
            key = rng.choice(sorted(holder))
        if rng.random() < 0.4:
            del holder[key]
            what.append(f"delete run.json {key}")
        else:
            holder[key] = rng.choice(_ODD_VALUES)
            what.append(f"retype run.json {key}")
    return doc, "; ".join(what)


def _manifest_case(seed: int, case: Path) -> tuple[list[str], Path, str, str]:
    """A copy of the sample run with a mutated run.json; analyze or whatif reads it."""
    run = case / "run"
    shutil.copytree(SAMPLE_RUN, run)
    doc, what = mutated_manifest(seed)
    (run / "run.json").write_text(json.dumps(doc))
    command = ["whatif", str(run), "--policy", "none"] if seed % 2 else ["analyze", str(run)]
    return [*command, "--json", str(case / "out.json")], run, "run.json", what


def _trace_case(seed: int, case: Path) -> tuple[list[str], Path, str, str]:
    sources = available_sources()
    source = sources[seed % len(sources)]
    data, what = mutated_trace(source, seed)
    trace = case / "rank-0.pt.trace.json.gz"
    trace.write_bytes(data)
    argv = ["analyze", str(trace), "--no-progress", "--json", str(case / "out.json")]
    return argv, trace, source, what


def run_case(seed: int, work: Path, *, manifest: bool = False) -> FuzzResult:
    """Mutate one source trace (picked by ``seed``), or with ``manifest`` the sample run's
    ``run.json``, run the command on it, classify the ending."""
    from overlapscope.cli import main

    case = work / f"seed-{seed}-{'manifest' if manifest else 'trace'}"
    case.mkdir(parents=True)
    argv, given, source, what = (_manifest_case if manifest else _trace_case)(seed, case)
    before = digest(given)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    except MemoryError:
        return FuzzResult(seed, source, what, "MemoryError", "")
    except BaseException as e:  # any escape is what this looks for
        tb = traceback.format_exception(e)[-1].strip()
        return FuzzResult(seed, source, what, "traceback", tb)
    lines = err.getvalue().strip().splitlines()
    if digest(given) != before:
        return FuzzResult(seed, source, what, "input changed", "")
    if code == 0:
        return FuzzResult(seed, source, what, "ok", err.getvalue().strip()[:200])
    errors = [ln for ln in lines if ln.startswith("overlapscope: error:")]
    if code == 2 and len(errors) == 1 and "Traceback" not in err.getvalue():
        return FuzzResult(seed, source, what, "error", errors[0][:200])
    return FuzzResult(seed, source, what, f"exit {code}", err.getvalue()[-300:])
