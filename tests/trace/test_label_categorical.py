"""A label column's categorical from its distinct objects equals the one from its values
(the former code, kept as :func:`_by_values`) and pandas' own."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from overlapscope.trace.attribution import _by_values, label_categorical

LANES = ["compute", "comm", "wait", "other"]


def _column(rng: random.Random) -> np.ndarray:
    """Constant strings, the same strings as other objects (built at run time), None, and
    now and then an odd value."""
    pool: list[object] = [*LANES, None, None, "unit3", "".join(["co", "mm"])]
    if rng.random() < 0.3:
        pool.append(rng.choice([float("nan"), 3, 2.5, True]))
    out = np.empty(rng.randint(0, 40), dtype=object)
    out[:] = [rng.choice(pool) for _ in range(len(out))]
    return out


# (pandas warns of values outside the given categories, which the odd columns have)
@pytest.mark.filterwarnings("ignore:Constructing a Categorical with a dtype")
@pytest.mark.parametrize("seed", range(40))
def test_label_categorical_from_objects_is_the_former_and_pandas(seed: int) -> None:
    rng = random.Random(seed)
    values = _column(rng)
    for categories in (None, LANES):
        got = label_categorical(values, categories)
        for want in (_by_values(values, categories), pd.Categorical(values, categories)):
            assert got.dtype == want.dtype
            assert got.codes.tolist() == want.codes.tolist()
