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
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
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


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_case(seed: int, work: Path) -> FuzzResult:
    """Mutate one source trace (picked by ``seed``), analyse it, classify the ending."""
    from overlapscope.cli import main

    sources = available_sources()
    source = sources[seed % len(sources)]
    data, what = mutated_trace(source, seed)
    case = work / f"seed-{seed}"
    case.mkdir(parents=True)
    trace = case / "rank-0.pt.trace.json.gz"
    trace.write_bytes(data)
    before = _sha(trace)
    err = io.StringIO()
    argv = ["analyze", str(trace), "--no-progress", "--json", str(case / "out.json")]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    except MemoryError:
        return FuzzResult(seed, source.name, what, "MemoryError", "")
    except BaseException as e:  # any escape is what this looks for
        tb = traceback.format_exception(e)[-1].strip()
        return FuzzResult(seed, source.name, what, "traceback", tb)
    lines = err.getvalue().strip().splitlines()
    if _sha(trace) != before:
        return FuzzResult(seed, source.name, what, "input changed", "")
    if code == 0:
        return FuzzResult(seed, source.name, what, "ok", err.getvalue().strip()[:200])
    errors = [ln for ln in lines if ln.startswith("overlapscope: error:")]
    if code == 2 and len(errors) == 1 and "Traceback" not in err.getvalue():
        return FuzzResult(seed, source.name, what, "error", errors[0][:200])
    return FuzzResult(seed, source.name, what, f"exit {code}", err.getvalue()[-300:])
