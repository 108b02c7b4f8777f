"""Say where a trace file's JSON breaks: a file that ends early (truncated) or a syntax error
in the middle (a ``NaN`` token, a stray byte), with the byte offset and the event it is in.

Only the error path reads this: the document is scanned once more, event by event, to name
the event (``traceEvents[K]``) the offset falls in.
"""

from __future__ import annotations

import json
import re

_EVENTS_KEY = re.compile(r'"traceEvents"\s*:\s*\[')
_SNIPPET_CHARS = 24


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _where(text: str, pos: int) -> str:
    """Which part of the document holds character ``pos``: ``in traceEvents[K]``, or the
    header before or after the events array."""
    found = _EVENTS_KEY.search(text, 0, pos + 1)
    if found is None:
        return "in the header before traceEvents"
    i, index, end = found.end(), 0, len(text)
    while True:
        while i < end and text[i] in " \t\r\n,":
            i += 1
        if i > pos or i >= end:
            return f"in traceEvents[{index}]"
        if text[i] == "]":  # the array ended before the offset
            return "after traceEvents"
        try:
            _, i = _DECODER.raw_decode(text, i)
        except ValueError:  # the event at i holds the error
            return f"in traceEvents[{index}]"
        if i > pos:
            return f"in traceEvents[{index}]"
        index += 1


def describe(data: bytes | bytearray, char_pos: int, message: str) -> str:
    """The problem, for a :class:`~overlapscope.trace.read.decode.TraceFileError`: ``char_pos``
    and ``message`` are the JSON decoder's (orjson counts characters, not bytes)."""
    text = bytes(data).decode("utf-8", errors="replace")
    pos = min(max(char_pos, 0), len(text))
    byte = len(text[:pos].encode("utf-8", errors="replace"))
    where = _where(text, pos)
    if not text[pos:].strip():
        return (
            f"truncated: the file ends at byte {byte} {where}, before the JSON document is "
            "complete; the export was cut short (a full disk, a killed process): copy or export "
            "the trace again"
        )
    snippet = text[pos : pos + _SNIPPET_CHARS].split("\n")[0]
    return (
        f"invalid JSON at byte {byte} {where} ({message.rstrip('.')}: {snippet!r}); the file is "
        "damaged or was not written by a JSON encoder (NaN and Infinity are not JSON): "
        "re-export the trace"
    )
