"""Seeded mutations of real inputs for the fuzz test (tests/reliability/fuzz.py): a trace's
events, its top-level keys, its header fields (``distributedInfo``, ``baseTimeNanoseconds``,
``deviceProperties``), its bytes (cut off, a byte-order mark); several ranks of a run at once
(a rank swapped in from another run, two ranks' files exchanged); and ``run.json``."""

from __future__ import annotations

import copy
import gzip
import json
import random
import shutil
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "traces"
SAMPLE_RUN = SAMPLES / "none"
ODD_VALUES: list[Any] = [None, "", "x", -1, 0, 1e308, -1e308, [], {}, True, 2**70, "1e3",
                         "x" * 100_000, [[1], [2]], {"a": "b"}]  # fmt: skip
# The header fields the loader types, and the fields inside them.
HEADER_FIELDS = {
    "distributedInfo": ("rank", "world_size", "backend", "pg_count", "pg_config", "nccl_version"),
    "baseTimeNanoseconds": (),
    "deviceProperties": ("id", "name", "totalGlobalMem", "numSms", "computeMajor"),
}


def load_doc(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    return doc


def mutate_events(doc: dict[str, Any], rng: random.Random) -> str:
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
            ev[key] = rng.choice(ODD_VALUES)
        elif op == "duplicate":
            events.insert(i, copy.deepcopy(ev))
        else:
            other = rng.choice(sorted(ev))
            ev[key], ev[other] = ev[other], ev[key]
        what.append(f"{op} {key} of event {i}")
    return "; ".join(what)


def mutate_top(doc: dict[str, Any], rng: random.Random) -> str:
    key = rng.choice(sorted(doc))
    if rng.random() < 0.5:
        del doc[key]
        return f"delete top-level {key}"
    doc[key] = rng.choice(ODD_VALUES)
    return f"retype top-level {key}"


def mutate_header(doc: dict[str, Any], rng: random.Random) -> str:
    """One header field, or a field inside it, deleted or retyped (or set out of range)."""
    field = rng.choice(sorted(HEADER_FIELDS))
    inner = HEADER_FIELDS[field]
    holder: Any = doc.get(field)
    if field == "deviceProperties" and isinstance(holder, list) and holder:
        holder = rng.choice(holder)
    if not inner or not isinstance(holder, dict) or rng.random() < 0.2:
        doc[field] = rng.choice([*ODD_VALUES, 2**63, -(2**40)])
        return f"retype header {field}"
    key = rng.choice(inner)
    if rng.random() < 0.25:
        holder.pop(key, None)
        return f"delete header {field}.{key}"
    holder[key] = rng.choice([*ODD_VALUES, 2**31, 1 << 21, -5])
    return f"retype header {field}.{key}"


def mutated_doc(doc: dict[str, Any], rng: random.Random, kind: str) -> str:
    return {"events": mutate_events, "top": mutate_top, "header": mutate_header}[kind](doc, rng)


def mutated_bytes(raw: bytes, rng: random.Random, kind: str) -> tuple[bytes, str]:
    if kind == "truncate":  # a trace cut off by a full disk
        cut = rng.randrange(len(raw))
        return raw[:cut], f"truncated at byte {cut} of {len(raw)}"
    return b"\xef\xbb\xbf" + raw, "UTF-8 BOM"


def sample_runs() -> list[Path]:
    """The shipped runs of several ranks (the CPU samples, the 2-rank GPU runs): the ones
    whose ranks can be swapped or exchanged."""
    return sorted(
        p
        for p in SAMPLES.iterdir()
        if (p / "run.json").is_file() and len(list(p.glob("rank-*.pt.trace.json.gz"))) > 1
    )


def mutated_run(run: Path, copy_of: Path, rng: random.Random, kind: str) -> str:
    """Several ranks of the run directory ``run`` (a copy of the sample run ``copy_of``) at
    once: a rank swapped in from another sample run, or two ranks' files exchanged."""
    names = sorted(p.name for p in run.glob("rank-*.pt.trace.json.gz"))
    if kind == "swap-in":
        other = rng.choice([r for r in sample_runs() if r.name != copy_of.name])
        name = rng.choice([n for n in names if (other / n).is_file()])
        shutil.copy(other / name, run / name)
        return f"{name} swapped in from {other.name}"
    a, b = rng.sample(names, 2)
    (run / a).rename(run / "tmp")
    (run / b).rename(run / a)
    (run / "tmp").rename(run / b)
    return f"{a} and {b} exchanged"


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
            holder[key] = rng.choice(ODD_VALUES[:12])
            what.append(f"retype run.json {key}")
    return doc, "; ".join(what)
