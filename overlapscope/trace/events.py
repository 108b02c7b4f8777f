"""What makes a trace event usable, checked once per file (:func:`bad_events`), and which
events are GPU activity.

An event left out is counted by reason; the loader prints one warning line per file
("3 events with a negative dur ignored in rank-0.pt.trace.json.gz").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# Why an event is left out (one warning per file says how many of each).
BAD_REASONS = (
    "a name that is not a string",
    "args that are not an object",
    "a missing or non-numeric ts",
    "a missing or non-numeric dur",
    "a negative dur",
    "an out-of-range ts or dur",
)
MAX_TS_US = 1e16  # ~300 years after 1970 in µs
MAX_DUR_US = 1e12  # ~11 days


def bad_events(
    odd_names: np.ndarray, odd_args: np.ndarray, ts: np.ndarray, dur: np.ndarray
) -> np.ndarray:
    """Per event: 0 when usable, else 1 + the index of the first reason in BAD_REASONS;
    ``odd_names``: the events whose name is not a string; ``odd_args``: those whose
    ``args`` is there but not an object."""
    with np.errstate(invalid="ignore"):
        checks = [
            odd_names,
            odd_args,
            ~np.isfinite(ts),
            ~np.isfinite(dur),
            dur < 0,
            # ts may be negative: it is relative to baseTimeNanoseconds.
            (np.abs(ts) > MAX_TS_US) | (dur > MAX_DUR_US),
        ]
    out = np.zeros(len(ts), dtype=np.int8)
    for i in range(len(checks) - 1, -1, -1):
        out[checks[i]] = i + 1
    return out


# Host-side events that may carry a stream argument (ROCm's hipLaunchKernel,
# hipMemcpyWithStream): CPU calls, not GPU activity.
HOST_CATEGORIES = frozenset(
    {
        "cuda_runtime",
        "cuda_driver",
        "hip_runtime",
        "cpu_op",
        "user_annotation",
        "python_function",
        # a range drawn on the GPU row around kernels: not activity of its own
        "gpu_user_annotation",
    }
)


def gpu_annotation(cat: pd.Categorical) -> np.ndarray:
    """Rows of Kineto's ``gpu_user_annotation`` category (by the categorical's codes)."""
    at = np.flatnonzero(np.asarray([str(c) == "gpu_user_annotation" for c in cat.categories]))
    if len(at) == 0:
        return np.zeros(len(cat), dtype=bool)
    return np.asarray(cat.codes) == at[0]


def host_category(cat: pd.Categorical) -> np.ndarray:
    host = np.asarray([str(c).lower() in HOST_CATEGORIES for c in cat.categories], dtype=bool)
    codes = np.asarray(cat.codes)
    return np.where(codes >= 0, host[np.maximum(codes, 0)] if len(host) else False, False)


def bad_summary(bad: np.ndarray) -> str:
    """``"3 events with a negative dur, 1 event with ..."`` for the left-out events."""
    counts = np.bincount(bad.astype(np.int64), minlength=len(BAD_REASONS) + 1)
    parts = [
        f"{n} event{'s' if n != 1 else ''} with {BAD_REASONS[i - 1]}"
        for i, n in enumerate(counts.tolist())
        if i > 0 and n > 0
    ]
    return ", ".join(parts)
