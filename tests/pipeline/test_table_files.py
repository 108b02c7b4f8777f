"""The cache's file format (``overlapscope/table_files.py``): a rank's events and any frame
read back as written, dtypes and categories included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from overlapscope.analysis.api import analyze
from overlapscope.sealed import read_payload
from overlapscope.table_files import (
    empty_table,
    read_events,
    read_table,
    table_dtypes,
    write_events,
    write_table,
)
from overlapscope.trace.run.loader import load_run
from tests.conftest import REPO

SHIPPED = sorted(p for p in (REPO / "traces").iterdir() if (p / "run.json").is_file())


def test_events_file_reads_back_as_pandas_reads_it(tmp_path: Path) -> None:
    """The events' Arrow file, written and read in one thread (cache.write_events), gives
    the columns asked for with the dtypes, categories and values ``pd.read_feather`` gives
    of the same file without its seal."""
    events = load_run(SHIPPED[0]).events.drop(columns="rank").reset_index(drop=True)
    path = tmp_path / "events.arrow"
    write_events(path, events)
    columns = ["name", "ts_us", "lane", "seq", "group"]
    got = read_events(path, columns)
    plain = tmp_path / "plain.arrow"
    plain.write_bytes(read_payload(path))
    pd.testing.assert_frame_equal(got, pd.read_feather(plain, columns=columns))
    pd.testing.assert_frame_equal(got, events[columns])


def _odd_table() -> pd.DataFrame:
    """What Arrow alone would not give back: None beside NaN in an object column, unused
    categories, a categorical of no category, int32."""
    return pd.DataFrame(
        {
            "rank": np.array([0, 0, 1, 1], dtype=np.int32),
            "step": [2, 3, 2, -1],
            "name": pd.Series(["a", None, np.nan, "b"], dtype=object),
            "lane": pd.Categorical(["comm", "comm", None, "wait"], ["comm", "wait", "memory"]),
            "unit": pd.Categorical([None] * 4, categories=pd.Index([], dtype=object)),
            "on_gpu": [True, False, True, False],
            "dur_us": [1.5, np.nan, 0.0, 2.0],
        }
    )


@pytest.mark.parametrize("source", ["odd", "empty", "one row", "timeline"])
def test_table_file_gives_the_frame_back(tmp_path: Path, source: str) -> None:
    """A reduced table's file (cache.write_table) reads back equal, dtypes and categories
    included: whole, one step's rows of some columns, no row, or no row read."""
    frames = {
        "odd": _odd_table,
        "empty": lambda: _odd_table().iloc[:0],
        "one row": lambda: _odd_table().iloc[1:2].reset_index(drop=True),
        "timeline": lambda: analyze(load_run(SHIPPED[0])).timeline,
    }
    df = frames[source]()
    path = tmp_path / "t.arrow"
    write_table(path, df)
    pd.testing.assert_frame_equal(read_table(path), df, check_exact=True)
    assert table_dtypes(path) == dict(df.dtypes)
    pd.testing.assert_frame_equal(empty_table(path), df.iloc[:0], check_index_type=False)
    for step in [*df["step"].unique()[:3], 99]:
        rows = df[df["step"] == step].reset_index(drop=True)
        for columns in (None, ["dur_us", "rank"], ["step", "rank"]):
            got = read_table(path, [("step", "==", step)], columns)
            want = rows if columns is None else rows[columns]
            pd.testing.assert_frame_equal(got, want, check_exact=True)
