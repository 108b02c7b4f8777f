"""Where commands write: every output path is checked before the work starts, and every file
is written whole (a temporary sibling renamed into place) so a failure never leaves a file
that looks complete.

``flag`` is the command-line flag that named the path, so the one-line error can name it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from overlapscope.errors import UserError

_DEFERRED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _existing_ancestor(path: Path) -> Path:
    p = path.absolute()
    while not p.exists():
        p = p.parent
    return p


def is_special(path: Path) -> bool:
    """An existing path (or a link to one) that is neither a regular file nor a directory:
    a device (``/dev/null``), a pipe or a terminal (``/dev/stdout``). Written in place: a
    file renamed over it would replace the device itself (as root, ``/dev/null`` for every
    program on the machine)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def check_file(path: str | Path, flag: str) -> Path:
    """A file the command will write: not a directory, in a folder that exists and is writable
    (or a device or pipe this process may write, such as ``/dev/null``)."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{flag} {p}: is a directory; give a file name")
    if is_special(p):
        if not os.access(p, os.W_OK):
            raise UserError(f"{flag} {p}: cannot write to it; pick another path")
        return p
    parent = Path(os.path.realpath(p)).parent  # a link is written through, to its file
    if parent.exists() and not parent.is_dir():
        raise UserError(f"{flag} {p}: {parent} is a file, not a folder; pick another path")
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
    """Write ``data`` to ``path`` whole: a temporary sibling, then an atomic rename. A link is
    written through (the file it names is replaced, the link stays); a device or pipe is
    written in place (:func:`is_special`)."""
    p = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    special = is_special(p)
    target = Path(os.path.realpath(p))
    tmp = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        if special:
            with open(p, "wb") as f:
                f.write(raw)
            return
        tmp.write_bytes(raw)
        os.replace(tmp, target)
    except OSError as e:
        if not special:
            tmp.unlink(missing_ok=True)
        where = f"{flag} {p}" if flag else str(p)
        raise UserError(f"{where}: cannot write ({e.strerror}); pick another path") from None


def write_files(files: Iterable[tuple[str | Path, bytes | str, str]]) -> None:
    """Write several ``(path, data, flag)`` files, each whole, in order."""
    for path, data, flag in files:
        write_file(path, data, flag)


def _same(a: Path, b: Path) -> bool:
    try:
        return a == b or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def check_apart(
    out: str | Path, inputs: Iterable[str | Path], flag: str, *, is_file: bool = False
) -> None:
    """``out`` may not be, contain or lie inside any of the command's ``inputs`` (a trace, a
    ``run.json``, a directory it reads): refused in one line naming both paths. A file
    output (``is_file``) holds nothing: a directory given for it is ``check_file``'s to
    refuse."""
    o = Path(out).resolve()
    for p in inputs:
        i = Path(p).resolve()
        holds = not is_file and o in i.parents
        if _same(o, i) or holds or i in o.parents:
            raise UserError(
                f"{flag} {out}: would write over the input {p}; write the output elsewhere"
            )


def only_ours(path: Path, marker: str, entries: re.Pattern[str]) -> bool:
    """``path`` holds ``marker`` and nothing whose name ``entries`` does not match: a folder
    overlapscope wrote, with nothing of the user's in it."""
    if not (path / marker).is_file():
        return False
    return all(entries.fullmatch(p.name) for p in path.iterdir())


def fresh_name(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``, ...: the first that does not exist."""
    candidate, n = path, 1
    while candidate.exists() or candidate.is_symlink():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def check_replace(
    out: Path, flag: str, *, force: bool, is_replaceable: Callable[[Path], bool]
) -> None:
    """An existing, non-empty ``out`` may be replaced only with ``force``, and only if it is
    ours (``is_replaceable``): never a folder with the user's files in it."""
    if out.exists() and any(out.iterdir()):
        if not force:
            raise UserError(
                f"{flag} {out} already exists: pass --force to replace it, or pick another"
            )
        if not is_replaceable(out):
            raise UserError(
                f"{flag} {out} exists and is not ours to replace: it holds files overlapscope "
                "did not write; refusing, pick another path"
            )


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP for the few renames that must not be cut in half."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _DEFERRED)


def swap_in(tmp: Path, out: Path) -> None:
    """Move the complete ``tmp`` to ``out``; an old ``out`` is removed only once ``tmp``
    has taken its place."""
    with signals_deferred():
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / out.name)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def keep_failed(tmp: Path, out: Path) -> Path:
    """Keep a failed build as a fresh ``<out>.failed`` (never over an earlier one)."""
    with signals_deferred():
        failed = fresh_name(out.with_name(out.name + ".failed"))
        os.replace(tmp, failed)
    return failed


def replace_dir(
    out: str | Path,
    build: Callable[[Path], None],
    *,
    flag: str,
    force: bool,
    is_replaceable: Callable[[Path], bool],
    protect: Iterable[Path] = (),
    keep_on_failure: bool = False,
) -> Path:
    """Build a directory in a temporary sibling, then move it to ``out``.

    An existing ``out`` is replaced only with ``force`` and only if ``is_replaceable(out)``;
    ``out`` may not be, contain or lie inside any ``protect`` path (the command's inputs).
    A failure in ``build`` (an interruption included) leaves ``out`` as it was; with
    ``keep_on_failure`` what was built is kept as a fresh ``<out>.failed``.
    """
    out = check_dir(out, flag)
    check_apart(out, protect, flag)
    check_replace(out, flag, force=force, is_replaceable=is_replaceable)
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
        swap_in(tmp, out.absolute())
    except BaseException as e:
        if keep_on_failure and tmp.exists():
            failed = keep_failed(tmp, out.absolute())
            if isinstance(e, UserError):
                raise UserError(f"{e} (what was written: {failed})") from None
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise UserError(
                f"{flag} {out}: cannot write ({e.strerror}); pick another path"
            ) from None
        raise
    return out
