"""A pickle reader that builds plain data only: nothing in the file can run.

A pickle is a small program: its ``GLOBAL`` / ``STACK_GLOBAL`` opcodes (and the ``EXT``
codes, through the copyreg registry) name any importable callable, which ``REDUCE``,
``BUILD``, ``INST``, ``OBJ`` and ``NEWOBJ`` then call. Every one of these reaches a callable
only through :meth:`pickle.Unpickler.find_class` (or ``persistent_load`` for persistent ids),
so an unpickler whose ``find_class`` and ``persistent_load`` refuse everything builds dicts,
lists, tuples, sets, numbers, strings, bytes, booleans and None, and stops at the first
opcode that would import anything, before it runs.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

from overlapscope.errors import UserError

ADMITTED = "dicts, lists, tuples, numbers, strings and None"


class RefusedObject(pickle.UnpicklingError):
    """The pickle names a class or callable (``module.name``); nothing was imported."""


class PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise RefusedObject(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedObject(f"persistent id {str(pid)[:40]!r}")


def loads_plain(data: bytes, path: Path) -> Any:
    """The plain data in ``data`` (the bytes of ``path``); a :class:`UserError` naming the
    file for anything else or a damaged pickle."""
    try:
        return PlainUnpickler(io.BytesIO(data)).load()
    except RefusedObject as e:
        raise UserError(
            f"{path}: refused: the pickle holds a {e} object and a Flight Recorder dump holds "
            f"only {ADMITTED} (nothing in it was run); pass torch's own dump"
        ) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(
            f"{path}: not a readable pickle ({why}); the dump is truncated or damaged: "
            "dump the rank again"
        ) from None
