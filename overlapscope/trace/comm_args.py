"""Collective arguments of NCCL kernels, gloo ops and ``record_param_comms`` (sizes, dtypes,
process groups), read only for the events that can carry them."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

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
            total += (int(np.prod(d)) if d else 1) * size
    return total if total > 0 else -1


def comm_args(names: pd.Categorical, args: list[Any]) -> pd.DataFrame:
    cats = np.asarray(names.categories, dtype=object)
    cat_is_comm = np.fromiter(
        (COMM_ARG_NAME_RE.match(c) is not None for c in cats), dtype=bool, count=len(cats)
    )
    idx = np.flatnonzero(cat_is_comm[names.codes]) if len(cats) else np.empty(0, np.int64)
    rows: dict[str, list[Any]] = {
        "coll_name": [],
        "in_nelems": [],
        "out_nelems": [],
        "dtype": [],
        "group_size": [],
        "pg_name": [],
        "seq_arg": [],
        "dims_bytes": [],
    }
    for i in idx:
        a = args[i] if isinstance(args[i], dict) else {}
        rows["coll_name"].append(a.get("Collective name"))
        rows["in_nelems"].append(a.get("In msg nelems"))
        rows["out_nelems"].append(a.get("Out msg nelems"))
        rows["dtype"].append(a.get("dtype"))
        rows["group_size"].append(a.get("Group size"))
        rows["pg_name"].append(a.get("Process Group Name"))
        rows["seq_arg"].append(a.get("Seq"))
        rows["dims_bytes"].append(_dims_bytes(a.get("Input Dims"), a.get("Input type")))
    out = pd.DataFrame(rows, index=pd.Index(idx, dtype=np.int64))
    for col in ("in_nelems", "out_nelems", "group_size", "seq_arg"):
        out[col] = pd.to_numeric(out[col], errors="coerce").astype("float64")
    out["dims_bytes"] = out["dims_bytes"].astype(np.int64)
    for col in ("coll_name", "dtype", "pg_name"):
        out[col] = pd.Series(rows[col], index=out.index, dtype=object)
    return out
