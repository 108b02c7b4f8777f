"""Collective arguments of NCCL kernels, gloo ops and ``record_param_comms`` (sizes, dtypes,
process groups), read only for the events that can carry them."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import orjson
import pandas as pd

from overlapscope.arrays import BoolArray, FloatArray, IntArray, ObjArray
from overlapscope.phases import CollectiveKind
from overlapscope.trace.attribution import Labels
from overlapscope.trace.fields import EMPTY_ARGS, Args, orjson_number
from overlapscope.trace.labels import collective_kind

GLOO_GROUP = "gloo"
NCCL_GROUP = "nccl"

# Collective-carrying names: NCCL kernels, gloo ops, the c10d bookkeeping op.
COMM_ARG_NAME_RE = re.compile(r"^(nccl|gloo:|record_param_comms)")

_DTYPE_BYTES: dict[str, int] = {
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
    "half": 2,
    "float16": 2,
    "c10::half": 2,
    "bfloat16": 2,
    "c10::bfloat16": 2,
    "int": 4,
    "int32": 4,
    "long": 8,
    "long int": 8,
    "int64": 8,
    "short": 2,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "char": 1,
    "signed char": 1,
    "unsigned char": 1,
    "byte": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1,
}


def dtype_bytes(dtype: object) -> int:
    """Size in bytes of a trace dtype string (``Float``, ``BFloat16``, ``c10::Half`` ...); 0 if
    unknown."""
    if not isinstance(dtype, str):
        return 0
    return _DTYPE_BYTES.get(dtype.strip().lower(), 0)


def _product(dims: list[int]) -> int:
    """``int(np.prod(dims))`` (1 for none) without numpy's per-call cost: the exact product
    where it fits in int64, as numpy's is there; numpy's own (which wraps around) beyond."""
    p = math.prod(dims)
    return p if -(2**63) <= p < 2**63 else int(np.prod(dims))


def _dims_bytes(dims: object, types: object) -> int:
    """Bytes of the tensors listed in ``Input Dims`` / ``Input type`` (tensor lists included)."""
    if not isinstance(dims, list) or not isinstance(types, list):
        return -1
    total = 0
    for d, t in zip(dims, types, strict=False):
        size = dtype_bytes(t)
        if size == 0 or not isinstance(d, list):
            continue
        if d and all(isinstance(x, list) for x in d):  # a tensor list
            total += sum(int(np.prod(x)) if x else 1 for x in d) * size
        elif all(isinstance(x, int) for x in d):
            total += _product(d) * size
    return total if total > 0 else -1


COMM_FIELDS = (
    *("coll_name", "in_nelems", "out_nelems", "dtype"),
    *("group_size", "pg_name", "seq_arg", "dims_bytes"),
)


def is_comm_name(name: str) -> bool:
    """Whether events of this name may carry collective arguments."""
    return COMM_ARG_NAME_RE.match(name) is not None


def _sized(raw: tuple[bytes, bytes], sizes: dict[tuple[bytes, bytes], int]) -> int:
    size = sizes.get(raw)
    if size is None:
        size = sizes[raw] = _dims_bytes(orjson.loads(raw[0]), orjson.loads(raw[1]))
    return size


def add_comm_rows(
    rows: dict[str, list[Any]], args: list[Args | None], sizes: dict[tuple[bytes, bytes], int]
) -> None:
    """Append the collective arguments of events that may be collectives to ``rows`` (one
    list per :data:`COMM_FIELDS`); ``args``: each event's ``args`` (None: not an object).
    ``sizes``: the tensors' bytes by their raw ``Input Dims`` and ``Input type``, filled as
    they are met (a job's collectives repeat their shapes every step: each is decoded once)."""
    picked = [EMPTY_ARGS if a is None else a for a in args]
    rows["coll_name"] += [a.coll_name for a in picked]
    rows["in_nelems"] += [orjson_number(a.in_nelems) for a in picked]
    rows["out_nelems"] += [orjson_number(a.out_nelems) for a in picked]
    rows["dtype"] += [a.dtype for a in picked]
    rows["group_size"] += [orjson_number(a.group_size) for a in picked]
    rows["pg_name"] += [a.pg_name for a in picked]
    rows["seq_arg"] += [orjson_number(a.seq_arg) for a in picked]
    rows["dims_bytes"] += [_sized((bytes(a.dims), bytes(a.types)), sizes) for a in picked]


_NUMERIC_FIELDS = ("in_nelems", "out_nelems", "group_size", "seq_arg")
_TEXT_FIELDS = ("coll_name", "dtype", "pg_name")


def _numbers(values: list[Any]) -> FloatArray:
    """``pd.to_numeric(values, errors="coerce")`` as float64: converted at once where every
    value is an int, a float or None (a collective's arguments, as Kineto writes them)."""
    if all(v is None or type(v) is int or type(v) is float for v in values):
        return np.asarray(values, dtype=np.float64)  # (None: NaN)
    return pd.to_numeric(pd.Series(values), errors="coerce").astype("float64").to_numpy()


def comm_frame(rows: dict[str, list[Any]], idx: np.ndarray) -> pd.DataFrame:
    """The collective arguments as a table indexed by the events' positions ``idx``
    (:data:`COMM_FIELDS`: the numbers as float64, ``dims_bytes`` int64, the rest objects)."""
    index = pd.Index(idx, dtype=np.int64)
    columns: dict[str, Any] = {}
    for col in COMM_FIELDS:
        if col in _NUMERIC_FIELDS:
            columns[col] = _numbers(rows[col])
        elif col in _TEXT_FIELDS:
            columns[col] = pd.Series(rows[col], index=index, dtype=object)
        else:
            columns[col] = np.asarray(rows[col], dtype=np.int64)
    return pd.DataFrame(columns, index=index, copy=False)


def collective_columns(
    comm_args: pd.DataFrame,
    cats: list[str],
    codes: IntArray,
    comm_rows: IntArray,
    out: Labels,
    on_gpu: BoolArray,
    world_size: int,
) -> IntArray:
    """Fill ``kind`` and ``group`` of the comm rows; return the per-row ``bytes``."""
    nbytes = np.full(len(codes), -1, dtype=np.int64)
    # classified once per name of a comm row (not per name of the trace: a regex each)
    comm_codes, at = np.unique(codes[comm_rows], return_inverse=True)
    kinds = np.asarray([collective_kind(cats[c]).value for c in comm_codes.tolist()], dtype=object)
    out.kind[comm_rows] = kinds[at.reshape(-1)]
    args = comm_args.reindex(comm_rows)
    coll = args["coll_name"].to_numpy(dtype=object)
    has_coll = np.asarray([isinstance(c, str) and c != "" for c in coll], dtype=bool)
    if has_coll.any():  # the argument beats the name (ncclDevKernel_Generic)
        out.kind[comm_rows[has_coll]] = [collective_kind(str(c)).value for c in coll[has_coll]]
    elem = np.asarray([dtype_bytes(d) for d in args["dtype"].to_numpy(dtype=object)])
    nel = np.fmax(args["in_nelems"].to_numpy(), args["out_nelems"].to_numpy())
    nccl_bytes = np.where(np.isfinite(nel) & (elem > 0), nel * elem, -1.0)
    # gloo: Input Dims is the shard of an all-gather, the whole buffer otherwise.
    dims_bytes = args["dims_bytes"].fillna(-1).to_numpy(dtype=np.float64)
    is_ag = out.kind[comm_rows] == CollectiveKind.ALL_GATHER.value
    gloo_bytes = np.where(dims_bytes > 0, dims_bytes * np.where(is_ag, max(world_size, 1), 1), -1.0)
    nbytes[comm_rows] = np.where(nccl_bytes > 0, nccl_bytes, gloo_bytes).astype(np.int64)
    pg = args["pg_name"].to_numpy(dtype=object)
    has_pg = np.asarray([isinstance(p, str) and p != "" for p in pg], dtype=bool)
    out.group[comm_rows] = np.where(has_pg, pg, np.where(on_gpu[comm_rows], NCCL_GROUP, GLOO_GROUP))
    return nbytes


def _cumcount(key: IntArray) -> IntArray:
    """Each row's position among the earlier rows of its key (``groupby(key).cumcount()``)."""
    order = np.argsort(key, kind="stable")  # each key's rows together, in row order
    ordered = key[order]
    at = np.arange(len(key))
    first = np.maximum.accumulate(np.where(np.r_[True, ordered[1:] != ordered[:-1]], at, 0))
    out = np.empty(len(key), dtype=np.int64)
    out[order] = at - first
    return out


def sequence(comm_rows: IntArray, group: ObjArray, step: IntArray, ts: FloatArray) -> IntArray:
    """Order of each collective within its (group, step) on this rank (by start, ties in
    row order)."""
    seq = np.full(len(step), -1, dtype=np.int64)
    if not len(comm_rows):
        return seq
    groups, _ = pd.factorize(group[comm_rows])
    if (groups < 0).any():  # a collective without a group (none so far): pandas' own way
        keyed = pd.DataFrame(
            {"g": group[comm_rows], "s": step[comm_rows], "t": ts[comm_rows]}, index=comm_rows
        ).sort_values(["t"], kind="stable")
        seq[keyed.index.to_numpy()] = keyed.groupby(["g", "s"], sort=False).cumcount().to_numpy()
        return seq
    by_start = np.argsort(ts[comm_rows], kind="stable")  # (NaN last, as sort_values)
    rows = comm_rows[by_start]
    _, key = np.unique(
        np.stack([groups[by_start], step[rows]], axis=1), axis=0, return_inverse=True
    )
    seq[rows] = _cumcount(key.reshape(-1))
    return seq
