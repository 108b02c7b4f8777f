"""Parts compressed apart, joined into one gzip member.

Each part of the file (the head, every rank's, the tail) is compressed on its own into a raw
deflate stream that ends on a byte boundary without closing it (a sync flush); the last part
closes it. Deflate streams so cut can be concatenated: the blocks of one part never refer back
into another's. The file is the gzip header, the parts in order and the trailer (the CRC-32
of the whole text, combined from the parts' own, and its length)::

    [gzip header][part 0 ... sync][rank 0 ... sync][rank 1 ... sync] ... [tail ... final][crc][size]

So a rank's part can be written anywhere (a Dask worker), and the file is assembled by
copying bytes: nobody holds more than one part's text. It is one gzip member, not one per
part, because some readers stop at the end of the first member (the Compression Streams
``gzip`` format DevTools uses refuses anything after it).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import BinaryIO

from isal import isal_zlib

# mtime 0, no name, OS unknown: the same bytes for the same text, wherever written
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
LEVEL = 2  # ISA-L's levels are 0-3; 2 packs Chrome traces ~10% smaller than 1 at ~0.8x speed
BUFFER_BYTES = 1 << 20  # text gathered before it is compressed


@dataclass(frozen=True, slots=True)
class PartSum:
    """What the trailer needs of a part: the CRC-32 and length of its text."""

    crc: int
    length: int


class PartWriter:
    """Compresses one part's text into ``out`` (``final``: the part that closes the stream)."""

    def __init__(self, out: BinaryIO, final: bool = False) -> None:
        self.out = out
        self.final = final
        self.deflate = isal_zlib.compressobj(LEVEL, isal_zlib.DEFLATED, -15)
        self.buffer = bytearray()
        self.crc = 0
        self.length = 0

    def write(self, text: bytes) -> None:
        self.buffer += text
        if len(self.buffer) >= BUFFER_BYTES:
            self._push()

    def _push(self) -> None:
        data = bytes(self.buffer)
        self.buffer.clear()
        self.crc = zlib.crc32(data, self.crc)
        self.length += len(data)
        self.out.write(self.deflate.compress(data))

    def close(self) -> PartSum:
        self._push()
        mode = isal_zlib.Z_FINISH if self.final else isal_zlib.Z_SYNC_FLUSH
        self.out.write(self.deflate.flush(mode))
        return PartSum(self.crc, self.length)


def _gf2_times(matrix: list[int], vector: int) -> int:
    total, row = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[row]
        vector >>= 1
        row += 1
    return total


def _gf2_square(matrix: list[int]) -> list[int]:
    return [_gf2_times(matrix, matrix[n]) for n in range(32)]


_ZERO_BYTES: list[list[int]] = []  # [k]: the operator of 2**k zero bytes, made on first use


def _zero_bytes(k: int) -> list[int]:
    if not _ZERO_BYTES:
        op = [0xEDB88320] + [1 << n for n in range(31)]  # one zero bit
        for _ in range(3):
            op = _gf2_square(op)
        _ZERO_BYTES.append(op)
    while len(_ZERO_BYTES) <= k:
        _ZERO_BYTES.append(_gf2_square(_ZERO_BYTES[-1]))
    return _ZERO_BYTES[k]


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """The CRC-32 of ``a + b`` from ``crc32(a)``, ``crc32(b)`` and ``len(b)``: ``crc1``
    carried through ``length2`` zero bytes (the operators of 2**k zero bytes over GF(2), one
    per bit of ``length2``), then ``crc2`` added."""
    k = 0
    while length2 > 0:
        if length2 & 1:
            crc1 = _gf2_times(_zero_bytes(k), crc1)
        length2 >>= 1
        k += 1
    return crc1 ^ crc2


def combine(parts: list[PartSum]) -> PartSum:
    crc, length = 0, 0
    for p in parts:
        crc = crc32_combine(crc, p.crc, p.length)
        length += p.length
    return PartSum(crc, length)


def trailer(total: PartSum) -> bytes:
    return struct.pack("<II", total.crc & 0xFFFFFFFF, total.length & 0xFFFFFFFF)
