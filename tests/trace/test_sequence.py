"""The collectives' sequence numbers from arrays (``comm_args.sequence``) equal the former
pandas code's (a stable sort by start, then ``groupby(group, step).cumcount()``, kept below
as the reference): ties and missing starts, several groups and steps, none at all."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from overlapscope.trace.read.comm_args import sequence


def _former(comm_rows, group, step, ts):
    seq = np.full(len(step), -1, dtype=np.int64)
    if len(comm_rows):
        keyed = pd.DataFrame(
            {"g": group[comm_rows], "s": step[comm_rows], "t": ts[comm_rows]}, index=comm_rows
        ).sort_values(["t"], kind="stable")
        seq[keyed.index.to_numpy()] = keyed.groupby(["g", "s"], sort=False).cumcount().to_numpy()
    return seq


@pytest.mark.parametrize("seed", range(20))
def test_sequence_equals_the_former_code(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 200))
    ts = rng.integers(0, 20, n).astype(np.float64)  # many ties
    ts[rng.random(n) < 0.05] = np.nan
    step = rng.integers(-1, 3, n)
    group = np.asarray(rng.choice(["nccl", "gloo", "pg0"], n), dtype=object)
    comm_rows = np.flatnonzero(rng.random(n) < 0.6)
    got = sequence(comm_rows, group, step, ts)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, _former(comm_rows, group, step, ts))


def test_sequence_with_a_collective_without_a_group_is_the_former_codes():
    group = np.asarray(["nccl", None, "nccl", "nccl"], dtype=object)
    step, ts = np.zeros(4, np.int64), np.asarray([3.0, 1.0, 2.0, 0.0])
    rows = np.arange(4)
    with np.errstate(invalid="ignore"):  # (the former code casts a missing count to int)
        np.testing.assert_array_equal(
            sequence(rows, group, step, ts), _former(rows, group, step, ts)
        )
