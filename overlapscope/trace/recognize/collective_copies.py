"""NCCL's copies: GPU copies that are a collective's device work (one rank, NCCL 2.28)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from overlapscope.arrays import BoolArray, FloatArray, IntArray
from overlapscope.trace.attribution import innermost_on_threads
from overlapscope.trace.read.parse import RawTrace


def collective_copies(
    raw: RawTrace,
    is_memory: BoolArray,
    anchors: tuple[FloatArray, IntArray],
    cats: list[str],
    codes: IntArray,
) -> tuple[IntArray, pd.DataFrame]:
    """GPU copies that are a collective's device work, and the comm arguments they take.

    NCCL with one rank moves nothing: an out-of-place all-gather or reduce-scatter is a
    ``Memcpy DtoD`` on the communicator's stream, launched inside the collective's
    ``record_param_comms`` op (observed with NCCL 2.28 on an H200, ``traces/gpu-*``). Such a
    copy is the collective (its kind, size and group are that op's); any other copy stays a
    copy. ``is_memory``: per row, a GPU copy or set by its name. Returns the copy rows and
    ``raw.comm_args`` with theirs added."""
    frame = raw.events
    on_gpu = frame["on_gpu"].to_numpy()
    anchor_ts, anchor_tid = anchors
    is_op = np.asarray([c == "record_param_comms" for c in cats], dtype=bool).reshape(len(cats))
    ops = np.flatnonzero(is_op[codes] & ~on_gpu)
    copies = np.flatnonzero(on_gpu & is_memory & (anchor_tid >= 0))
    if len(ops) == 0 or len(copies) == 0:
        return copies[:0], raw.comm_args
    coll = raw.comm_args["coll_name"].reindex(ops).to_numpy(dtype=object)
    ops = ops[np.asarray([isinstance(c, str) and c not in ("", "wait") for c in coll])]
    ts = frame["ts_us"].to_numpy()
    end = ts + frame["dur_us"].to_numpy()
    tid = frame["tid"].to_numpy()
    at = innermost_on_threads(ts[ops], end[ops], tid[ops], anchor_ts[copies], anchor_tid[copies])
    copies, held = copies[at >= 0], ops[at[at >= 0]]
    if len(copies) == 0:
        return copies, raw.comm_args
    theirs = raw.comm_args.reindex(held).set_axis(copies, axis=0)
    args = pd.concat([raw.comm_args.drop(index=copies, errors="ignore"), theirs]).sort_index()
    return copies, args.astype(raw.comm_args.dtypes.to_dict())
