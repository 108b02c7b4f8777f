"""GPU step windows from arrays (``partition.gpu_step_windows``) equal the former pandas
code's (kept below as the reference): steps with and without kernels, steps after the last
kernel, no kernel at all."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from overlapscope.analysis.timeline.partition import any_of, gpu_step_windows


def _former(gpu: pd.DataFrame, steps: list[int]) -> pd.DataFrame:
    first = gpu.groupby("step")["ts_us"].min()
    last_end = float(gpu["end_us"].max()) if len(gpu) else 0.0
    starts = np.asarray([float(first.get(s, np.nan)) for s in steps], dtype=np.float64)
    filled = pd.Series(starts).bfill().fillna(last_end).to_numpy()
    filled = np.maximum.accumulate(filled) if len(filled) else filled
    ends = np.append(filled[1:], last_end) if len(filled) else filled
    ends = np.maximum(ends, filled)
    return pd.DataFrame({"step": steps, "start_us": filled, "end_us": ends})


CASES = {
    "every step has kernels": ([3, 3, 4, 5, 5], [5, 3, 20, 40, 31], [3, 4, 5]),
    "a step without kernels": ([3, 3, 5], [5, 3, 40], [3, 4, 5]),
    "steps after the last kernel": ([3], [5], [3, 4, 5]),
    "steps before the first kernel": ([5, 5], [50, 41], [2, 3, 5]),
    "kernels of a step not profiled": ([7, 3], [70, 3], [3, 4]),
    "no kernel": ([], [], [3, 4]),
    "no step": ([3], [1], []),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_gpu_step_windows_equal_the_former_ones(case):
    step, ts, steps = CASES[case]
    step_a = np.asarray(step, dtype=np.int64)
    ts_a = np.asarray(ts, dtype=np.float64)
    end_a = ts_a + np.arange(len(ts_a), dtype=np.float64) + 0.5
    got = gpu_step_windows(step_a, ts_a, end_a, steps)
    want = _former(pd.DataFrame({"step": step_a, "ts_us": ts_a, "end_us": end_a}), steps)
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@pytest.mark.parametrize("wanted", [[], [2], [2, 5], [-1, 0, 3, 127]], ids=str)
def test_any_of_is_isin(wanted):
    codes = np.random.default_rng(1).integers(-1, 8, 500).astype(np.int8)
    np.testing.assert_array_equal(any_of(codes, wanted), np.isin(codes, wanted))
