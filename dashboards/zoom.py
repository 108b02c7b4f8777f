"""A zoom's x range from Plotly's ``relayoutData``, whatever the browser (or anyone) sends.

``relayoutData`` arrives from the client: keys and values of any JSON type. A range bound
that is not a finite number (a string, null, a bool, a list) means no usable zoom, never an
exception in a callback.
"""

from __future__ import annotations

import math
import re

_BOUND_KEY = re.compile(r"xaxis\d*\.range\[([01])\]")
_RANGE_KEY = re.compile(r"xaxis\d*\.range")
_AUTO_KEY = re.compile(r"xaxis\d*\.autorange")


def _number(value: object) -> float | None:
    """A finite float, or None for anything else (bools included: JSON true is not 1 ms)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    as_float = float(value)
    return as_float if math.isfinite(as_float) else None


def x_window(relayout: object) -> tuple[float, float] | str | None:
    """``(lo, hi)`` in the axis unit, ``"auto"`` for a reset, None when the x range did not
    change or the values are not numbers."""
    if not isinstance(relayout, dict) or not relayout:
        return None
    keys = [k for k in relayout if isinstance(k, str)]
    if any(_AUTO_KEY.fullmatch(k) for k in keys):
        return "auto"
    bounds: dict[str, float | None] = {}
    for k in keys:
        v = relayout[k]
        if m := _BOUND_KEY.fullmatch(k):
            bounds[m.group(1)] = _number(v)
        elif _RANGE_KEY.fullmatch(k) and isinstance(v, list) and len(v) == 2:
            bounds = {"0": _number(v[0]), "1": _number(v[1])}
    lo, hi = bounds.get("0"), bounds.get("1")
    if lo is None or hi is None or hi <= lo:
        return None
    return lo, hi
