"""One column of a slice of decoded events: ids, numbers, strings, and which values are of a
type the column cannot hold (counted and left out by the reader, trace.events.bad_events).

Values follow orjson's reading of the document (:func:`~overlapscope.trace.read.fields.
orjson_number`): an integer beyond 64 bits is a float.
"""

from __future__ import annotations

import itertools
import zlib
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd

from overlapscope.trace.read.fields import orjson_number


def odd_types(values: list[Any], *usual: type) -> np.ndarray:
    """Per value: its type is none of ``usual`` (all False, found in one pass in C, for a
    well-formed trace)."""
    if set(map(type, values)) <= set(usual):
        return np.zeros(len(values), dtype=bool)
    return np.fromiter((type(v) not in usual for v in values), dtype=bool, count=len(values))


def int_column(values: list[Any], odd: list[np.ndarray] | None = None) -> np.ndarray:
    """The values as int64 ids; ``odd`` (when given) gets, per value, whether it is neither
    an integer (within 64 bits: beyond, orjson reads a float) nor a string."""
    try:
        column = np.asarray(values, dtype=np.int64)
        if odd is not None:  # (a bool or a float converts too)
            odd.append(odd_types(values, int))
        return column
    except (TypeError, ValueError, OverflowError):
        values = [orjson_number(v) for v in values]
        if odd is not None:
            odd.append(odd_types(values, int, str))
        num = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce")
        out = num.to_numpy(dtype=np.float64, na_value=np.nan, copy=True)
        bad = ~np.isfinite(out)
        # Non-numeric ids (e.g. tid "PyTorch Profiler") get stable negative ids.
        out[bad] = [-2.0 - zlib.crc32(str(values[i]).encode()) for i in np.flatnonzero(bad)]
        with np.errstate(invalid="ignore"):  # a float beyond int64 (1e308): garbage, not a warning
            return out.astype(np.int64)


def float_column(values: list[Any], checked: bool = False) -> np.ndarray:
    """The values as float64; one that is not a JSON number (a string such as "1e3", a
    bool, null, a list) is NaN: the event is then counted and left out, never read as a
    number it does not hold. ``checked``: every value is known to be a number."""
    odd = np.zeros(0, dtype=bool) if checked else odd_types(values, int, float)
    if not odd.any():
        return np.asarray(values, dtype=np.float64)
    return np.asarray([np.nan if o else v for v, o in zip(values, odd.tolist(), strict=True)],
                      dtype=np.float64)  # fmt: skip


def category(values: list[Any]) -> pd.Categorical:
    try:
        cat = pd.Categorical(values)
    except TypeError:  # unhashable values (a list where a string belongs)
        return pd.Categorical([str(orjson_number(v)) for v in values])
    if any(not isinstance(c, str) for c in cat.categories):
        cat = pd.Categorical([str(orjson_number(v)) for v in values])
    return cat


class Strings:
    """One string column built a slice at a time: each value's code in order of first
    appearance, the categories sorted at the end, as pandas makes them of the whole column
    (which it does itself, :func:`category`, when some value is not a string)."""

    def __init__(self) -> None:
        # A value met for the first time gets the next code: the dict's length, given by
        # the dict itself (no Python call per row; half the CPU of a pass to find the new
        # values and another to look every row up, measured).
        self.index: defaultdict[Any, int] = defaultdict()
        self.index.default_factory = self.index.__len__
        self.parts: list[np.ndarray | list[Any]] = []  # codes, or a slice's odd values

    def add(self, values: list[Any], keep_odd: bool = True) -> np.ndarray | None:
        """The slice's codes (None when some value is not a string: the slice is then kept
        as it is, or, ``keep_odd`` False, not added)."""
        index, known = self.index, len(self.index)
        try:
            codes = np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))
        except TypeError:  # an unhashable value (a list where a string belongs)
            codes = None
        # Every value that is not a string is a new key here (the known ones are strings,
        # which equal nothing else): such a slice is kept as it is, its new keys dropped.
        if codes is None or not all(type(v) is str for v in itertools.islice(index, known, None)):
            while len(index) > known:
                index.popitem()
            if keep_odd:
                self.parts.append(values)
            return None
        self.parts.append(codes)
        return codes

    def categorical(self) -> pd.Categorical:
        cats = list(self.index)
        if any(isinstance(p, list) for p in self.parts):
            found = np.asarray(cats, dtype=object)
            values: list[Any] = []
            for p in self.parts:
                values += p if isinstance(p, list) else found[p].tolist()
            return category(values)
        order = sorted(range(len(cats)), key=cats.__getitem__)
        rank = np.empty(len(cats), dtype=np.int64)
        rank[order] = np.arange(len(cats))
        codes = rank[np.concatenate(self.parts)] if self.parts else np.empty(0, np.int64)
        return pd.Categorical.from_codes(codes, categories=[cats[i] for i in order])


def strings(column: Strings, values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The slice's codes in ``column``, and which values are not strings (a missing key
    among them; coded as "": the event is left out, trace.events.bad_events)."""
    codes = column.add(values, keep_odd=False)
    if codes is not None:  # all strings: nothing was left out (no pass to find out)
        return codes, np.zeros(len(values), dtype=bool)
    odd = odd_types(values, str)
    codes = column.add([v if type(v) is str else "" for v in values])
    assert codes is not None  # every value is a string now
    return codes, odd
