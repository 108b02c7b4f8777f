"""Collective arguments of NCCL kernels, gloo ops and ``record_param_comms`` (sizes, dtypes,
process groups), read only for the events that can carry them."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pandas as pd

from overlapscope.arrays import BoolArray, FloatArray, IntArray, ObjArray
from overlapscope.phases import CollectiveKind
from overlapscope.trace.attribution import Labels
from overlapscope.trace.naming.generic import collective_kind
from overlapscope.trace.read.fields import EMPTY_ARGS, Args, orjson_number

GLOO_GROUP = "gloo"
NCCL_GROUP = "nccl"

# Collective-carrying names: NCCL kernels, gloo ops, the c10d bookkeeping op.
# (and the c10d ops that issue gloo's collectives: their tensors' sizes, trace/groups/issuing.py)
COMM_ARG_NAME_RE = re.compile(r"^(nccl|gloo:|record_param_comms|c10d::)")

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


def _tensor_bytes(d: object, t: object) -> int:
    """Bytes of one ``Input Dims`` entry of type ``t`` (a tensor list: its tensors summed);
    0 when it is not a tensor of a known element type (a scalar's dims are ``[]``: size 1)."""
    size = dtype_bytes(t)
    if size == 0 or not isinstance(d, list):
        return 0
    if d and all(isinstance(x, list) for x in d):  # a tensor list
        return sum(int(np.prod(x)) if x else 1 for x in d) * size
    if all(isinstance(x, int) for x in d):
        return _product(d) * size
    return 0


def _numel(d: object) -> int:
    """Elements of one ``Input Dims`` entry (a tensor list: its tensors summed, whatever
    ``Input type`` says: c10d's coalesced ops record ``TensorList``); -1 when it is not a
    tensor's dims, 0 for a scalar's ``[]``."""
    if not isinstance(d, list) or not d:
        return 0 if d == [] else -1
    if all(isinstance(x, list) and all(isinstance(y, int) for y in x) for x in d):
        return sum(_product(x) for x in d)
    return _product(d) if all(isinstance(x, int) for x in d) else -1


def _dims_bytes(dims: object, types: object) -> tuple[int, int, int, int]:
    """Bytes of the tensors listed in ``Input Dims`` / ``Input type`` (tensor lists
    included), of the first input alone (``record_param_comms``: the collective's input
    tensor, its other inputs the sequence number, the group, ...), and the elements of the
    first and second inputs (a c10d op's output and input, trace/groups/issuing.py); -1 when none is
    known."""
    if not isinstance(dims, list) or not isinstance(types, list):
        return -1, -1, -1, -1
    each = [_tensor_bytes(d, t) for d, t in zip(dims, types, strict=False)]
    total = sum(each)
    first = each[0] if each else 0
    numel = [_numel(d) for d in dims[:2]] + [-1, -1]
    return (
        (total if total > 0 else -1), (first if first > 0 else -1),
        (numel[0] if numel[0] > 0 else -1), (numel[1] if numel[1] > 0 else -1),
    )  # fmt: skip


COMM_FIELDS = (
    *("coll_name", "in_nelems", "out_nelems", "dtype"),
    *("group_size", "pg_name", "pg_desc", "pg_ranks", "seq_arg"),
    *("dims_bytes", "first_bytes", "first_numel", "second_numel"),
)


def is_comm_name(name: str) -> bool:
    """Whether events of this name may carry collective arguments."""
    return COMM_ARG_NAME_RE.match(name) is not None


def _sized(
    raw: tuple[bytes, bytes], sizes: dict[tuple[bytes, bytes], tuple[int, int, int, int]]
) -> tuple[int, int, int, int]:
    size = sizes.get(raw)
    if size is None:
        size = sizes[raw] = _dims_bytes(orjson.loads(raw[0]), orjson.loads(raw[1]))
    return size


def add_comm_rows(
    rows: dict[str, list[Any]],
    args: list[Args | None],
    sizes: dict[tuple[bytes, bytes], tuple[int, int, int, int]],
) -> None:
    """Append the collective arguments of events that may be collectives to ``rows`` (one
    list per :data:`COMM_FIELDS`); ``args``: each event's ``args`` (None: not an object).
    ``sizes``: the tensors' bytes by their raw ``Input Dims`` and ``Input type``, filled as
    they are met (a job's collectives repeat their shapes every step: each is decoded once):
    all of them, and the first input alone."""
    picked = [EMPTY_ARGS if a is None else a for a in args]
    rows["coll_name"] += [a.coll_name for a in picked]
    rows["in_nelems"] += [orjson_number(a.in_nelems) for a in picked]
    rows["out_nelems"] += [orjson_number(a.out_nelems) for a in picked]
    rows["dtype"] += [a.dtype for a in picked]
    rows["group_size"] += [orjson_number(a.group_size) for a in picked]
    rows["pg_name"] += [a.pg_name for a in picked]
    rows["pg_desc"] += [a.pg_desc for a in picked]
    rows["pg_ranks"] += [_ranks_text(a.pg_ranks) for a in picked]
    rows["seq_arg"] += [orjson_number(a.seq_arg) for a in picked]
    both = [_sized((bytes(a.dims), bytes(a.types)), sizes) for a in picked]
    rows["dims_bytes"] += [b[0] for b in both]
    rows["first_bytes"] += [b[1] for b in both]
    rows["first_numel"] += [b[2] for b in both]
    rows["second_numel"] += [b[3] for b in both]


def _ranks_text(value: object) -> str | None:
    """``Process Group Ranks`` (a list of ints, or its text ``"[0, 2]"``) as ``"0,2"``;
    None when it is neither."""
    if isinstance(value, str):
        value = re.findall(r"-?\d+", value) if re.fullmatch(r"[\[\]\d,\s]*", value) else None
    if not isinstance(value, list) or not value:
        return None
    try:
        ranks = sorted({int(v) for v in value})
    except (TypeError, ValueError):
        return None
    return ",".join(map(str, ranks)) if all(0 <= r < 2**20 for r in ranks) else None


_NUMERIC_FIELDS = ("in_nelems", "out_nelems", "group_size", "seq_arg")
_TEXT_FIELDS = ("coll_name", "dtype", "pg_name", "pg_desc", "pg_ranks")


def _numbers(values: list[Any]) -> FloatArray:
    """``pd.to_numeric(values, errors="coerce")`` as float64: converted at once where every
    value is an int, a float or None (a collective's arguments, as Kineto writes them)."""
    if all(v is None or type(v) is int or type(v) is float for v in values):
        return np.asarray(values, dtype=np.float64)  # (None: NaN)
    return pd.to_numeric(pd.Series(values), errors="coerce").astype("float64").to_numpy()


def comm_frame(rows: dict[str, list[Any]], idx: np.ndarray) -> pd.DataFrame:
    """The collective arguments as a table indexed by the events' positions ``idx``
    (:data:`COMM_FIELDS`: the numbers as float64, ``dims_bytes`` and ``first_bytes`` int64,
    the rest objects)."""
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


# The element type NCCL kernels carry in their names (``ncclKernel_AllReduce_RING_LL_Sum_float``,
# ``..._bf16``): what the kernel's own arguments give of a size when no ``dtype`` is recorded.
_KERNEL_DTYPE_RE = re.compile(
    r"_(float|double|half|bf16|int8_t|uint8_t|int32_t|uint32_t|int64_t|uint64_t|f8e4m3|f8e5m2)"
    r"(?:\(|$)"
)
_KERNEL_DTYPE_BYTES = {
    "float": 4, "double": 8, "half": 2, "bf16": 2, "int8_t": 1, "uint8_t": 1, "int32_t": 4,
    "uint32_t": 4, "int64_t": 8, "uint64_t": 8, "f8e4m3": 1, "f8e5m2": 1,
}  # fmt: skip


def kernel_dtype_bytes(name: str) -> int:
    """Element size of the type named in an NCCL kernel's name; 0 when it names none."""
    m = _KERNEL_DTYPE_RE.search(name)
    return _KERNEL_DTYPE_BYTES[m.group(1)] if m else 0


def _texts(values: ObjArray) -> BoolArray:
    return np.asarray([isinstance(v, str) and v != "" for v in values], dtype=bool)


def _msg_bytes(args: pd.DataFrame, elem: npt.NDArray[np.int64]) -> FloatArray:
    """``max(In msg nelems, Out msg nelems) * element size``: the gathered buffer of an
    all-gather, the input of the others; -1 where a count (Kineto writes -1 for unknown) or
    the element size is unknown."""
    nel = np.fmax(args["in_nelems"].to_numpy(), args["out_nelems"].to_numpy())
    return np.where(np.isfinite(nel) & (nel >= 0) & (elem > 0), nel * elem, -1.0)


def collective_bytes(
    own: pd.DataFrame,
    issued: pd.DataFrame,
    ranged: pd.DataFrame,
    is_ag: BoolArray,
    names: list[str],
    world_size: int,
) -> IntArray:
    """Each collective's size as nccl-tests counts it (the gathered buffer for all-gather,
    the input otherwise), from whatever the trace has, in this order:

    1. ``In msg nelems`` / ``Out msg nelems`` x ``dtype`` of the op that issued it
       (``record_param_comms``);
    2. its ``Input Dims`` x the element size of ``Input type`` (older profilers record no
       counts): the first input, the collective's tensor (times the group size for an
       all-gather, whose input is one rank's shard);
    3. the ``Input Dims`` of the ``nccl:<op>`` range around its launch, the tensor the
       process group was given (a shard for an all-gather): a DDP bucket's all-reduce is
       issued by a ``record_param_comms`` whose inputs are a ``TensorList`` of ``[]`` dims,
       and only this range carries the flat bucket;
    4. the collective's own arguments (an NCCL kernel's counts and ``dtype``, else the
       element type in its name; a gloo op's ``Input Dims``, its shard for an all-gather);
    5. unknown: -1.

    ``own``: the collective rows' arguments; ``issued``: those of the op that issued each,
    ``ranged``: those of the ``nccl:<op>`` range around it (NaN rows where none);
    ``names``: the rows' event names."""
    elem = np.asarray([dtype_bytes(d) for d in issued["dtype"].to_numpy(dtype=object)])
    first = _msg_bytes(issued, elem)
    group = issued["group_size"].to_numpy()
    fan = np.where(is_ag, np.where(np.isfinite(group) & (group >= 1), group, world_size), 1)
    shard = issued["first_bytes"].fillna(-1).to_numpy(dtype=np.float64)
    second = np.where(shard > 0, shard * np.maximum(fan, 1), -1.0)
    tensor = ranged["first_bytes"].fillna(-1).to_numpy(dtype=np.float64)
    in_range = np.where(tensor > 0, tensor * np.maximum(fan, 1), -1.0)
    own_elem = np.asarray([dtype_bytes(d) for d in own["dtype"].to_numpy(dtype=object)])
    named = np.asarray([kernel_dtype_bytes(n) for n in names])
    third = _msg_bytes(own, np.where(own_elem > 0, own_elem, named))
    # gloo: Input Dims is the shard of an all-gather, the whole buffer otherwise.
    dims = own["dims_bytes"].fillna(-1).to_numpy(dtype=np.float64)
    fourth = np.where(dims > 0, dims * np.where(is_ag, max(world_size, 1), 1), -1.0)
    out = np.full(len(own), -1.0)
    for rung in (fourth, third, in_range, second, first):  # the last one known wins
        out = np.where(rung > 0, rung, out)
    return out.astype(np.int64)


def collective_columns(
    comm_args: pd.DataFrame,
    cats: list[str],
    codes: IntArray,
    comm_rows: IntArray,
    out: Labels,
    on_gpu: BoolArray,
    world_size: int,
    issuer: tuple[IntArray, IntArray],
) -> IntArray:
    """Fill ``kind`` and ``group`` of the comm rows; return the per-row ``bytes``.
    ``issuer``: per comm row, the row of the ``record_param_comms`` op that issued it and
    of the ``nccl:<op>`` range around its launch (-1: none). The kind comes from the
    collective's own ``Collective name``, else the issuing op's, else the range's name,
    else the collective's name (``ncclDevKernel_Generic`` and ``SendRecv`` kernels name no
    collective); sizes: :func:`collective_bytes`."""
    param_comms, annotation = issuer
    nbytes = np.full(len(codes), -1, dtype=np.int64)
    # classified once per name of a comm row (not per name of the trace: a regex each)
    comm_codes, at = np.unique(codes[comm_rows], return_inverse=True)
    kinds = np.asarray([collective_kind(cats[c]).value for c in comm_codes.tolist()], dtype=object)
    out.kind[comm_rows] = kinds[at.reshape(-1)]
    args = comm_args.reindex(comm_rows)
    issued = comm_args.reindex(param_comms)  # (-1: no such row, all NaN)
    ranged = np.asarray([cats[codes[r]] if r >= 0 else None for r in annotation.tolist()])
    coll = args["coll_name"].to_numpy(dtype=object)
    for fallback in (issued["coll_name"].to_numpy(dtype=object), ranged):
        coll = np.where(_texts(coll), coll, fallback)
    has_coll = _texts(coll)
    if has_coll.any():  # the argument beats the name (ncclDevKernel_Generic)
        out.kind[comm_rows[has_coll]] = [collective_kind(str(c)).value for c in coll[has_coll]]
    is_ag = out.kind[comm_rows] == CollectiveKind.ALL_GATHER.value
    names = [cats[c] for c in codes[comm_rows].tolist()]
    ranges = comm_args.reindex(annotation)
    nbytes[comm_rows] = collective_bytes(args, issued, ranges, is_ag, names, world_size)
    own_pg = args["pg_name"].to_numpy(dtype=object)
    pg = np.where(_texts(own_pg), own_pg, issued["pg_name"].to_numpy(dtype=object))
    has_pg = _texts(pg)
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
