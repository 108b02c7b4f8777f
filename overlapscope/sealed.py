"""Files that prove they are whole: how the cache writes and reads every file it keeps.

A file is written to a temporary name beside its destination, then renamed (:func:`atomic`):
a reader sees all of it or nothing, even while another process writes the same entry. It
ends in a seal, 16 bytes after the payload::

    payload ... | b"OVS1" | CRC-32 of the payload (4, little endian) | payload length (8)

so a file cut short (a full disk, a process killed mid-copy, a crash of the machine before
its pages reached the disk) or with bytes changed is told from a whole one before anything
reads its content: :class:`DamagedFile`, never a wrong figure (pyarrow does not check an
lz4 Arrow file's values, and a flipped bit mostly reads back as another value; a pickle
unpickles changed numbers as readily). CRC-32 is the check: ``zlib.crc32`` reads several
GB/s, a small part of what reading the file costs.

A process killed while writing leaves its temporary file (``.<name>.<host>-<pid>-<thread>.tmp``);
:func:`sweep` removes those of processes of this host that are gone.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import shutil
import socket
import struct
import threading
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

MAGIC = b"OVS1"
_SEAL = struct.Struct("<4sIQ")  # magic, CRC-32, payload length
SEAL_BYTES = _SEAL.size
_CHUNK = 1 << 20


class DamagedFile(Exception):
    """A cache file that is not whole: cut short, changed, or not ours."""

    def __init__(self, path: Path | str, why: str) -> None:
        super().__init__(path, why)  # (the arguments: picklable across processes)
        self.path = Path(path)
        self.why = why

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


def temporary_prefix(name: str) -> str:
    """The start of a temporary name for ``name`` of this process: ``.<name>.<host>-<pid>-``
    (what :func:`sweep` reads; a temporary folder adds its random part and ``.tmp``)."""
    return f".{name}.{socket.gethostname()}-{os.getpid()}-"


def atomic(dest: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)``, the seal appended, then ``tmp`` renamed to ``dest``. A failure to
    write (a full disk, a read-only folder) names ``dest``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    # (the thread too: two threads of a dashboard writing one entry share no temporary file)
    tmp = dest.with_name(f"{temporary_prefix(dest.name)}{threading.get_ident()}.tmp")
    try:
        write(tmp)
        _seal(tmp)
        os.replace(tmp, dest)
    except OSError as e:
        raise _naming(e, dest) from e
    finally:
        tmp.unlink(missing_ok=True)


def _naming(e: OSError, dest: Path) -> OSError:
    """``e`` naming ``dest``, the file meant (not its temporary name; pyarrow's errors name
    no file and bury the errno in their text)."""
    code = e.errno
    if code is None and (m := re.search(r"\[errno (\d+)\]", str(e))):
        code = int(m.group(1))
    return OSError(code, os.strerror(code) if code else str(e), str(dest))


def _seal(path: Path) -> None:
    crc, size = 0, 0
    with open(path, "r+b") as f:
        while chunk := f.read(_CHUNK):
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
        f.write(_SEAL.pack(MAGIC, crc, size))


def payload_size(data: Any, path: Path) -> int:
    """The payload's length in ``data`` (a whole sealed file: bytes, a memory map or an
    Arrow buffer), once its seal is checked; :class:`DamagedFile` when it does not hold."""
    view = memoryview(data).cast("B")
    if len(view) < SEAL_BYTES:
        raise DamagedFile(path, f"{len(view)} bytes, shorter than a seal: cut short")
    magic, crc, size = _SEAL.unpack(view[-SEAL_BYTES:])
    if magic != MAGIC or size != len(view) - SEAL_BYTES:
        raise DamagedFile(path, "no seal at its end: cut short, or not written by overlapscope")
    if zlib.crc32(view[:size]) != crc:
        raise DamagedFile(path, "its checksum does not match: changed since it was written")
    return int(size)


def read_payload(path: Path) -> memoryview:
    """The checked payload of a sealed file (read whole)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError as e:  # (its entry said it was there)
        raise DamagedFile(path, "missing from its entry") from e
    return memoryview(data)[: payload_size(data, path)]


def dump(path: Path, value: object) -> None:
    """``value`` pickled into a sealed file (:func:`atomic`)."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    atomic(path, lambda t: t.write_bytes(data))


def load(path: Path) -> Any:
    """What :func:`dump` wrote; :class:`DamagedFile` when the file is not whole or what it
    holds no longer unpickles (classes of another version)."""
    payload = read_payload(path)
    try:
        return pickle.loads(payload)
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError) as e:
        raise DamagedFile(path, f"does not unpickle ({type(e).__name__}: {e})") from e


def sweep(folders: Iterable[Path]) -> int:
    """Removes, in ``folders``, the temporary files and folders that writers of this host
    left when they were killed (their process is gone); returns how many."""
    host, removed = socket.gethostname(), 0
    for folder in folders:
        with contextlib.suppress(OSError):
            for entry in folder.iterdir():
                if not _left_by_dead_writer(entry.name, host):
                    continue
                with contextlib.suppress(OSError):
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
                    removed += 1
    return removed


def _left_by_dead_writer(name: str, host: str) -> bool:
    """``name`` is a temporary one (``.<name>.<host>-<pid>-<tag>.tmp``) of this host's
    process ``pid``, which is gone."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return False
    parts = name[: -len(".tmp")].rsplit("-", 2)
    if len(parts) != 3:
        return False
    head, pid, _ = parts
    return head.endswith(f".{host}") and pid.isdigit() and not _alive(int(pid))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # (another user's process: alive)
    return True
