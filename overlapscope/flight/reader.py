"""Read one Flight Recorder dump: torch's pickle (``_dump_fr_trace``) or its JSON
(``_dump_fr_trace_json``), into a :class:`Dump`.

A dump is a dict: ``version``, ``pg_config`` (each process group's name, description and
ranks), ``pg_status`` (per group: the last collective enqueued, started and completed),
``comm_lib_version`` and ``entries``, the last N collectives of the rank, oldest first. The
rank is not in the dump: as torch's own analyser does, it is the number that ends the file
name (``rank_3``, ``nccl_trace_rank_3``, ``rank3.json``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from overlapscope.errors import UserError
from overlapscope.flight.unpickle import loads_plain

# The dump versions whose fields this reader was checked against (torch 2.13 writes 2.10).
KNOWN_VERSIONS = ("2.10",)
_RANK_RE = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle))?$")
_REQUIRED = ("version", "entries")


@dataclass(frozen=True, slots=True)
class Dump:
    path: Path
    rank: int
    version: str
    fmt: str  # "pickle" | "json"
    pg_config: dict[str, Any]
    pg_status: dict[str, Any]
    entries: list[dict[str, Any]]


def rank_of(path: Path) -> int:
    m = _RANK_RE.search(path.name)
    if m is None:
        raise UserError(
            f"{path}: a Flight Recorder dump's rank is the number its name ends with "
            "(rank_<K>, as torch names them); rename it"
        )
    return int(m.group(1))


def _decode(path: Path, data: bytes) -> tuple[Any, str]:
    if data[:1] == b"\x80":  # a pickle's PROTO opcode
        return loads_plain(data, path), "pickle"
    try:
        return orjson.loads(data), "json"
    except orjson.JSONDecodeError as e:
        raise UserError(
            f"{path}: neither a Flight Recorder pickle nor JSON ({str(e).splitlines()[0]}); "
            "pass torch's dump as written"
        ) from None


def read_dump(path: Path) -> Dump:
    """The dump in ``path``; a one-line :class:`UserError` naming the file when it is not
    one, is damaged, or has a version this reader does not know."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UserError(f"{path}: cannot read the dump ({e.strerror})") from None
    doc, fmt = _decode(path, data)
    if not isinstance(doc, dict) or any(k not in doc for k in _REQUIRED):
        raise UserError(
            f"{path}: not a Flight Recorder dump (no {' / '.join(_REQUIRED)}); pass the files "
            "torch's Flight Recorder wrote (TORCH_FR_DUMP_TEMP_FILE, comm_traces/)"
        )
    version = str(doc["version"])
    if version not in KNOWN_VERSIONS:
        raise UserError(
            f"{path}: Flight Recorder dump version {version!r} is not one this reader knows "
            f"({', '.join(KNOWN_VERSIONS)}); dump with torch 2.13 or read it with torch's "
            "fr_trace"
        )
    entries = doc["entries"]
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise UserError(f"{path}: its 'entries' is not a list of records; dump the rank again")
    return Dump(
        path=path,
        rank=rank_of(path),
        version=version,
        fmt=fmt,
        pg_config=_dict(doc.get("pg_config")),
        pg_status=_dict(doc.get("pg_status")),
        entries=entries,
    )


def _dict(v: object) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}
