"""Read a trace file into its event columns with bounded memory.

A large file in Kineto's layout (torch's ``export_chrome_trace``: one event per indented
block) is read as a stream (gunzipped by ISA-L as it is read) and decoded a slice of events
at a time: neither the whole file's bytes nor the objects of all its events exist at once.
Any other file, and any file the stream cannot take whole (another layout, a slice that does
not decode, a corrupt gzip), is read whole (:func:`read_bytes`) and decoded as one document
(:func:`overlapscope.trace.read.decode.decode`), which gives the errors the user sees; both ways
give the same columns.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any

import orjson
from isal import igzip

from overlapscope.trace.read.decode import Columns, EventColumns, TraceFileError, decode

_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark (editors on Windows)
# The warning for a trace whose text follows a byte-order mark: read as if it had none, but
# not said nothing of (the file is not as the profiler wrote it).
BOM_SKIPPED = (
    "a UTF-8 byte-order mark before the JSON text, skipped: the profiler writes none "
    "(was the file re-saved by an editor?)"
)
# torch's export_chrome_trace writes one event per indented block; the events array is cut
# at these separators.
_EVENT_SEP = b"\n  },\n  {"
# A slice of events decoded at once: small enough that its decoded objects are still in the
# CPU's caches when the columns are built from them. Against 2 MB slices of 1 MB blocks,
# read_trace took 5-10% less CPU and peaked at less than half the memory above the idle
# process (33 MB GPU trace: 0.128 -> 0.115 s, 39 -> 17 MB; 56 MB CPU trace: 0.209 -> 0.203 s,
# 47 -> 22 MB; measured with 128 KB to 4 MB slices, 256 KB to 1 MB blocks).
CHUNK_BYTES = 512 * 1024
BLOCK_BYTES = 512 * 1024  # read (and gunzipped) at once
JOIN_SLICES = 4  # the buffer the slices are cut from holds this many slices


def _gunzip(data: bytes, path: Path) -> bytes:
    try:
        return igzip.decompress(data)  # ~1.7x the CPU speed of zlib's inflate (measured)
    except Exception:  # any refusal: zlib's own reading gives the message
        pass
    try:
        return gzip.decompress(data)
    except EOFError as e:  # the stream stops before its end marker: the file ends early
        raise TraceFileError(
            path, f"truncated gzip ({e}); the file was cut short: copy or export it again"
        ) from e
    except (OSError, zlib.error) as e:
        raise TraceFileError(
            path, f"corrupt gzip ({e}); copy the file again or re-export the trace"
        ) from e


def _text(data: bytes | bytearray, path: Path) -> tuple[bytes | bytearray, bool]:
    """The JSON text past a byte-order mark, and whether there was one; an empty file
    raises."""
    bom = data.startswith(_BOM)
    if bom:
        data = data[3:]
    if not data or data.isspace():  # (strip() would copy the whole file)
        raise TraceFileError(path, "empty file; the profiler did not write this trace")
    return data, bom


def read_bytes(path: Path) -> bytes | bytearray:
    """The file's bytes, gunzipped."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TraceFileError(path, f"cannot read ({e.strerror or e})") from e
    if data[:2] == _GZIP_MAGIC:
        data = _gunzip(data, path)
    return data


def read_text(path: Path) -> bytes | bytearray:
    """The file's JSON text: gunzipped, past a byte-order mark (the warning for one is the
    loader's, :data:`BOM_SKIPPED`); an empty file raises."""
    return _text(read_bytes(path), path)[0]


class _Stream:
    """A trace file's text read into one buffer allocated once: gunzipped by ISA-L straight
    into it (``readinto``), the undecoded rest moved to its front before each refill.

    Growing a buffer by appended blocks (and the gunzipped blocks themselves) cost a task
    ~12 ms of copies per 33 MB GPU trace: with the tasks' malloc settings
    (:func:`overlapscope.pipeline.memory.released`) a growing buffer is copied where an
    ``mremap`` would have moved it (measured: read_document 115 -> 99 ms)."""

    def __init__(self, path: Path, capacity: int) -> None:
        self.file = path.open("rb")
        gz = self.file.read(2) == _GZIP_MAGIC
        self.file.seek(0)
        self.src: Any = igzip.IGzipFile(fileobj=self.file, mode="rb") if gz else self.file
        self.buf = bytearray(capacity)
        self.end = 0  # the text is buf[:end]

    def refill(self, start: int) -> int:
        """Moves ``buf[start:end]`` to the front, then reads until the buffer is full or the
        file ends; the number of bytes read."""
        left = self.end - start
        with memoryview(self.buf) as view:
            view[:left] = view[start : self.end]
            self.end = left
            while self.end < len(self.buf):
                got = self.src.readinto(view[self.end : self.end + BLOCK_BYTES])
                if not got:
                    break
                self.end += got
        return self.end - left

    def rest(self) -> bytearray:
        """The text from the front of the buffer to the end of the file."""
        whole = self.buf[: self.end]
        while block := self.src.read(BLOCK_BYTES):
            whole += block
        return whole

    def close(self) -> None:
        self.src.close()
        self.file.close()


class _NotSliced(Exception):
    """The stream cannot be decoded in slices; ``data``: the whole file when it was read."""

    def __init__(self, data: bytes | bytearray | None = None) -> None:
        super().__init__()
        self.data = data


def _opening(stream: _Stream) -> tuple[int, int, int]:
    """Where the text starts (past a byte-order mark), where ``"traceEvents"`` is in it and
    its first event; the buffer holds the first ``2 * CHUNK_BYTES`` (or more) of the text."""
    stream.refill(0)
    buf, end = stream.buf, stream.end
    if end < 2 * CHUNK_BYTES:  # a small file: decoded whole
        raise _NotSliced(buf[:end])
    first = 3 if buf.startswith(_BOM) else 0
    key = buf.find(b'"traceEvents"', first, end)
    open_ = buf.find(b"[", key, end)
    if key < 0 or open_ < 0 or buf.find(_EVENT_SEP, key, end) < 0:  # another layout
        raise _NotSliced(stream.rest())
    return first, key, open_ + 1


def _sliced(stream: _Stream) -> tuple[dict[str, Any], Columns, bool]:
    """Decode a Kineto-layout stream a slice of events at a time."""
    first, key, pos = _opening(stream)
    buf = stream.buf
    head = bytes(buf[first:key])
    build = EventColumns()
    # Each slice is decoded in place with the byte on either side of it (the array's
    # bracket or a comma), pos - 1 and the comma after "\n  }".
    while True:
        cut = buf.find(_EVENT_SEP, pos + CHUNK_BYTES, stream.end)
        if cut >= 0:
            build.add_slice(buf, pos - 1, cut + 5)
            pos = cut + 5  # past the comma
            continue
        if pos == 1 and stream.end == len(buf):  # an event larger than the buffer
            raise _NotSliced()
        got = stream.refill(pos - 1)  # what is left, then the next blocks behind it
        pos = 1
        if not got:
            break
    close = buf.rfind(b"]", 0, stream.end)
    if close < pos:
        raise _NotSliced()
    build.add_slice(buf, pos - 1, close + 1)
    top = orjson.loads(head + b'"traceEvents": []' + buf[close + 1 : stream.end])
    if not isinstance(top, dict):
        raise _NotSliced()
    return top, build.finish(), first > 0


def read_document(path: Path) -> tuple[dict[str, Any], Columns, bool]:
    """The top-level fields the analysis reads, the event columns of one trace file and
    whether a UTF-8 byte-order mark (skipped) came before its text; raises
    :class:`TraceFileError` naming ``path`` when it cannot be used."""
    data: bytes | bytearray | None = None
    stream: _Stream | None = None
    try:
        stream = _Stream(path, JOIN_SLICES * CHUNK_BYTES)
        return _sliced(stream)
    except _NotSliced as e:
        data = e.data
    except Exception:  # read whole below, which names the problem
        pass
    finally:
        if stream is not None:
            stream.close()
    text, bom = _text(read_bytes(path) if data is None else data, path)
    obj, cols = decode(text, path)
    return obj, cols, bom
