"""What makes a trace event usable, checked once per file (:func:`bad_events`), and which
events are GPU activity.

An event left out is counted by reason; the loader prints one warning line per file
("3 events with a negative dur ignored in rank-0.pt.trace.json.gz").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# Why a complete event is left out (one warning per file says how many of each). A complete
# event needs each key the analysis reads: ph, cat, name, tid, ts and dur (args where the
# event is GPU activity: its stream).
BAD_REASONS = (
    "a missing or non-string name",
    "a missing or non-string cat",
    "a missing tid, or one neither an integer nor a string",
    "args that are not an object",
    "a missing or non-numeric ts",
    "a missing or non-numeric dur",
    "a negative dur",
    "an out-of-range ts or dur",
    "GPU activity (kernel, memcpy, memset) without a stream in its args",
)
NO_STREAM = len(BAD_REASONS)  # the last reason's code: parse.read_trace sets it
# Entries of traceEvents that are not complete events and are left out, counted alike.
NO_PHASE = "a missing or unknown ph"
NOT_AN_OBJECT = "a value that is not a JSON object"
# The profiler's allocator records (instants), and why one is left out.
MEMORY_EVENT = "[memory]"
BAD_MEMORY = f"the name {MEMORY_EVENT} but no numeric ts or integer Total Allocated"
BAD_THREAD_NAME = "the name thread_name but no integer tid or string args.name"
MAX_TS_US = 1e16  # ~300 years after 1970 in µs
MAX_DUR_US = 1e12  # ~11 days
# Categories of GPU activity: Kineto puts the stream in its args.
GPU_ACTIVITY = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})


def bad_events(odd: tuple[np.ndarray, ...], ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Per event: 0 when usable, else 1 + the index of the first reason in BAD_REASONS;
    ``odd``: per event, its name, cat, tid and args are of a type they cannot have (in
    BAD_REASONS' order)."""
    with np.errstate(invalid="ignore"):
        checks = [
            *odd,
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


def _in_categories(cat: pd.Categorical, names: frozenset[str]) -> np.ndarray:
    """Per event: its category, lower-cased, is one of ``names``."""
    found = np.asarray([str(c).lower() in names for c in cat.categories], dtype=bool)
    codes = np.asarray(cat.codes)
    return np.where(codes >= 0, found[np.maximum(codes, 0)] if len(found) else False, False)


def host_category(cat: pd.Categorical) -> np.ndarray:
    return _in_categories(cat, HOST_CATEGORIES)


def bad_summary(bad: np.ndarray, others: dict[str, int] | None = None) -> str:
    """``"3 events with a negative dur, 1 event with ..."`` for the left-out events;
    ``others``: entries left out before they were complete events, by reason."""
    counts = np.bincount(bad.astype(np.int64), minlength=len(BAD_REASONS) + 1)
    found = [(n, BAD_REASONS[i - 1]) for i, n in enumerate(counts.tolist()) if i > 0 and n > 0]
    found += [(n, why) for why, n in (others or {}).items() if n > 0]
    return ", ".join(f"{n} event{'s' if n != 1 else ''} with {why}" for n, why in found)


def gpu_activity(cat: pd.Categorical) -> np.ndarray:
    """Per event: its category is GPU activity (:data:`GPU_ACTIVITY`)."""
    return _in_categories(cat, GPU_ACTIVITY)
