"""Where commands write: every output path is checked before the work starts, and every file
is written whole (a temporary sibling renamed into place) so a failure never leaves a file
that looks complete.

``flag`` is the command-line flag that named the path, so the one-line error can name it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from overlapscope.errors import UserError


def _existing_ancestor(path: Path) -> Path:
    p = path.absolute()
    while not p.exists():
        p = p.parent
    return p


def check_file(path: str | Path, flag: str) -> Path:
    """A file the command will write: not a directory, in a folder that exists and is writable."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{flag} {p}: is a directory; give a file name")
    parent = p.absolute().parent
    if not parent.is_dir():
        raise UserError(f"{flag} {p}: folder {parent} does not exist; create it or pick another")
    if not os.access(parent, os.W_OK):
        raise UserError(f"{flag} {p}: cannot write in {parent}; pick another path")
    return p


def check_dir(path: str | Path, flag: str) -> Path:
    """A directory the command will create (with parents) or write into."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UserError(f"{flag} {p}: is a file, not a directory; give a directory")
    base = _existing_ancestor(p)
    if not base.is_dir():
        raise UserError(f"{flag} {p}: {base} is a file; give a directory path")
    if not os.access(base, os.W_OK):
        raise UserError(f"{flag} {p}: cannot write in {base}; pick another path")
    return p


def write_file(path: str | Path, data: bytes | str, flag: str = "") -> None:
    """Write ``data`` to ``path`` whole: a temporary sibling, then an atomic rename."""
    p = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    tmp = p.with_name(f".{p.name}.partial-{os.getpid()}")
    try:
        tmp.write_bytes(raw)
        os.replace(tmp, p)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        where = f"{flag} {p}" if flag else str(p)
        raise UserError(f"{where}: cannot write ({e.strerror}); pick another path") from None


def write_files(files: Iterable[tuple[str | Path, bytes | str, str]]) -> None:
    """Write several ``(path, data, flag)`` files, each whole, in order."""
    for path, data, flag in files:
        write_file(path, data, flag)


def check_apart(out: str | Path, inputs: Iterable[str | Path], flag: str) -> None:
    """``out`` may not be, contain or lie inside any of the command's ``inputs``."""
    o = Path(out).resolve()
    for p in inputs:
        i = Path(p).resolve()
        if o == i or o in i.parents or i in o.parents:
            raise UserError(f"{flag} {out}: overlaps the input {p}; write somewhere else")


def replace_dir(
    out: str | Path,
    build: Callable[[Path], None],
    *,
    flag: str,
    force: bool,
    is_replaceable: Callable[[Path], bool],
    protect: Iterable[Path] = (),
) -> Path:
    """Build a directory in a temporary sibling, then move it to ``out``.

    An existing ``out`` is replaced only with ``force`` and only if ``is_replaceable(out)``;
    ``out`` may not be, contain or lie inside any ``protect`` path (the command's inputs).
    A failure in ``build`` leaves ``out`` as it was.
    """
    out = check_dir(out, flag)
    check_apart(out, protect, flag)
    if out.exists() and any(out.iterdir()):
        if not force:
            raise UserError(f"{flag} {out} exists: pass --force to replace it, or pick another")
        if not is_replaceable(out):
            raise UserError(f"{flag} {out} exists and is not ours to replace; pick another")
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=parent))
    except OSError as e:
        raise UserError(
            f"{flag} {out}: cannot create it ({e.strerror}); pick another path"
        ) from None
    try:
        build(tmp)
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp makes it 0700; a folder the user made would not be
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=parent))
            os.replace(out, old / out.name)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"{flag} {out}: cannot write ({e.strerror}); pick another path") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
