"""A rank whose rows hold no CPU op (a GPU-only trace, or a fuzzed one) has no syncs: the
kind of each CPU call is looked up over an empty list then, and an empty list must still
index as a mask (tests/trace/test_bad_input.py's fuzzing found the IndexError)."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pandas as pd

from overlapscope.analysis.host.syncs import SYNC_COLUMNS, rank_syncs


def _gpu_only_rows() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "name": ["ncclDevKernel_AllGather_RING_LL", "void gemm_kernel"],
            "on_gpu": np.array([True, True]),
            "correlation": np.array([7, 8], dtype=np.int64),
            "step": np.array([1, 1], dtype=np.int64),
            "tid": np.array([7, 7], dtype=np.int64),
            "ts_us": np.array([0.0, 10.0]),
            "end_us": np.array([5.0, 20.0]),
            "dur_us": np.array([5.0, 10.0]),
        }
    )


def test_rank_without_cpu_ops_has_no_syncs() -> None:
    steps = pd.DataFrame({"step": [1], "start_us": [0.0]})
    found = rank_syncs(_gpu_only_rows(), 0, cast(Any, None), steps, pd.DataFrame())
    assert found.empty
    assert list(found.columns) == list(SYNC_COLUMNS)
