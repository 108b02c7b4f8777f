"""The ``run.json`` an overlapscope run writes beside its traces, as the loader reads it.

:func:`read_run_json` is the one place the loader reads it (to be switched to the typed run
manifest, ``overlapscope/manifest.py``): a file that is not valid JSON, or whose fields have
the wrong type, is a one-line :class:`~overlapscope.errors.UserError` naming the file and
the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from overlapscope.errors import UserError

RUN_META = "run.json"
# Largest world size believed (a larger one is a corrupt file, not a run).
MAX_WORLD_SIZE = 1 << 20
_FIX = "repair it from the run's copy, or delete it to analyse the traces as plain traces"


def _bad(path: Path, field: str, value: object, expected: str) -> UserError:
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return UserError(f"{path}: field {field!r} is {shown}, expected {expected}; {_FIX}")


def _check_fields(path: Path, meta: dict[str, Any]) -> None:
    """The fields the analysis reads, each checked for type and range."""
    if "world_size" in meta:
        ws = meta["world_size"]
        if isinstance(ws, bool) or not isinstance(ws, int) or not 1 <= ws <= MAX_WORLD_SIZE:
            raise _bad(path, "world_size", ws, f"an integer from 1 to {MAX_WORLD_SIZE}")
    if "traces" in meta:
        names = meta["traces"]
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise _bad(path, "traces", names, "a list of trace file names")
    if "peak_mem_bytes" in meta:
        peaks = meta["peak_mem_bytes"]
        if not isinstance(peaks, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in peaks
        ):
            raise _bad(path, "peak_mem_bytes", peaks, "a list of byte counts per rank")
    if "units" in meta and not isinstance(meta["units"], list):
        raise _bad(path, "units", meta["units"], "a list of units")
    for key in ("config", "predicted"):
        if key in meta and meta[key] is not None and not isinstance(meta[key], dict):
            raise _bad(path, key, meta[key], "an object")
    if "run_id" in meta and not isinstance(meta["run_id"], (str, type(None))):
        raise _bad(path, "run_id", meta["run_id"], "a string")


def read_run_json(run_dir: Path) -> dict[str, Any] | None:
    """The run directory's ``run.json`` (None when there is none), its fields checked."""
    path = run_dir / RUN_META
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_bytes().decode("utf-8-sig"))
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e}); {_FIX}") from e
    except (UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{path}: not valid JSON ({e}); {_FIX}") from e
    if not isinstance(meta, dict):
        raise UserError(f"{path}: not a JSON object; {_FIX}")
    _check_fields(path, meta)
    return meta


def listed_traces(
    run_dir: Path, meta: dict[str, Any] | None, strict: bool, allow_flag: str, warnings: list[str]
) -> list[Path] | None:
    """The trace files ``run.json`` lists (None: it lists none). A listed file that is
    missing is a missing rank: an error, or with ``strict=False`` a warning and the rest."""
    names = (meta or {}).get("traces")
    if not names:
        return None
    listed = [run_dir / n for n in names]
    absent = [p for p in listed if not p.is_file()]
    if absent and strict:
        raise UserError(
            f"{absent[0]}: missing (run.json lists it); copy the run again, or pass "
            f"{allow_flag} to analyse the {len(listed) - len(absent)} ranks present"
        )
    warnings.extend(f"{p}: missing (run.json lists it)" for p in absent)
    return [p for p in listed if p.is_file()]


def run_state(
    metas: Iterable[tuple[Path, dict[str, Any] | None]], warnings: list[str]
) -> tuple[dict[str, Any] | None, bool]:
    """(the run's meta, whether it is a completed overlapscope run) from its directories."""
    meta: dict[str, Any] | None = None
    completed = False
    for d, loaded in metas:
        partial = sorted(d.glob("*.partial"))
        if loaded is not None:
            meta = loaded
            completed = not partial
            pred = loaded.get("predicted")
            if isinstance(pred, dict):
                warnings.append(
                    f"{d}: a what-if prediction ({pred.get('scenario')} from "
                    f"{pred.get('from')}), not a measured run"
                )
        if partial:
            warnings.append(
                f"{d}: {partial[0].name} present: not a completed overlapscope run; "
                "analysed as plain traces"
            )
    return meta, completed
