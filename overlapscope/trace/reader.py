"""Read a trace file into its event columns with bounded memory.

A large file in Kineto's layout (torch's ``export_chrome_trace``: one event per indented
block) is read as a stream (gunzipped by ISA-L as it is read) and decoded a slice of events
at a time: neither the whole file's bytes nor the objects of all its events exist at once.
Any other file, and any file the stream cannot take whole (another layout, a slice that does
not decode, a corrupt gzip), is read whole (:func:`read_bytes`) and decoded as one document
(:func:`overlapscope.trace.decode.decode`), which gives the errors the user sees; both ways
give the same columns.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from isal import igzip

from overlapscope.trace.decode import Columns, EventColumns, TraceFileError, decode

_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark (editors on Windows)
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
JOIN_SLICES = 4  # the buffer the slices are cut from is refilled to this many slices


def _gunzip(data: bytes, path: Path) -> bytes:
    try:
        return igzip.decompress(data)  # ~1.7x the CPU speed of zlib's inflate (measured)
    except Exception:  # any refusal: zlib's own reading gives the message
        pass
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise TraceFileError(
            path, f"corrupt gzip ({e}); copy the file again or re-export the trace"
        ) from e


def _checked(data: bytes | bytearray, path: Path) -> bytes | bytearray:
    if data.startswith(_BOM):
        data = data[3:]
    if not data or data.isspace():  # (strip() would copy the whole file)
        raise TraceFileError(path, "empty file; the profiler did not write this trace")
    return data


def read_bytes(path: Path) -> bytes | bytearray:
    """The file's JSON text, gunzipped, without a byte-order mark."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TraceFileError(path, f"cannot read ({e.strerror or e})") from e
    if data[:2] == _GZIP_MAGIC:
        data = _gunzip(data, path)
    return _checked(data, path)


def _blocks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        gz = f.read(2) == _GZIP_MAGIC
        f.seek(0)
        src: Any = igzip.IGzipFile(fileobj=f, mode="rb") if gz else f
        while block := src.read(BLOCK_BYTES):
            yield block


class _NotSliced(Exception):
    """The stream cannot be decoded in slices; ``data``: the whole file when it was read."""

    def __init__(self, data: bytes | bytearray | None = None) -> None:
        super().__init__()
        self.data = data


def _opening(blocks: Iterator[bytes]) -> tuple[bytes, int, int]:
    """The first ``2 * CHUNK_BYTES`` (or more) of the text, where the event array opens in
    it (the offset of ``"traceEvents"`` and of its first event)."""
    buf = b""
    while len(buf) < 2 * CHUNK_BYTES:
        block = next(blocks, None)
        if block is None:  # a small file: decoded whole
            raise _NotSliced(buf)
        buf += block
    text = buf[3:] if buf.startswith(_BOM) else buf
    key = text.find(b'"traceEvents"')
    open_ = text.find(b"[", key)
    if key < 0 or open_ < 0 or text.find(_EVENT_SEP, key) < 0:  # another layout
        whole = bytearray(buf)  # grown in place: no second copy of the file at the end
        for block in blocks:
            whole += block
        raise _NotSliced(whole)
    return text, key, open_ + 1


def _sliced(blocks: Iterator[bytes]) -> tuple[dict[str, Any], Columns]:
    """Decode a Kineto-layout stream a slice of events at a time."""
    text, key, pos = _opening(blocks)
    head, buf = text[:key], bytearray(text)
    del text
    build = EventColumns()
    # Each slice is decoded in place with the byte on either side of it (the array's
    # bracket or a comma), pos - 1 and the comma after "\n  }".
    while True:
        cut = buf.find(_EVENT_SEP, pos + CHUNK_BYTES)
        if cut >= 0:
            build.add_slice(buf, pos - 1, cut + 5)
            pos = cut + 5  # past the comma
            continue
        # What is left, then several blocks appended in place: the decoded head is dropped
        # from the front of the buffer (no copy: a bytearray moves its start), the blocks
        # are appended into its spare room.
        del buf[: pos - 1]
        pos, grown = 1, False
        while len(buf) < JOIN_SLICES * CHUNK_BYTES and (block := next(blocks, None)) is not None:
            buf += block
            grown = True
        if not grown:
            break
    close = buf.rfind(b"]")
    if close < pos:
        raise _NotSliced()
    build.add_slice(buf, pos - 1, close + 1)
    top = orjson.loads(head + b'"traceEvents": []' + buf[close + 1 :])
    if not isinstance(top, dict):
        raise _NotSliced()
    return top, build.finish()


def read_document(path: Path) -> tuple[dict[str, Any], Columns]:
    """The top-level fields the analysis reads and the event columns of one trace file;
    raises :class:`TraceFileError` naming ``path`` when it cannot be used."""
    data: bytes | bytearray | None = None
    try:
        return _sliced(_blocks(path))
    except _NotSliced as e:
        data = e.data
    except Exception:  # read whole below, which names the problem
        pass
    whole = read_bytes(path) if data is None else _checked(data, path)
    return decode(whole, path)
