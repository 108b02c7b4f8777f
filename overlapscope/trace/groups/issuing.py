"""The ``c10d::`` op that issued each gloo collective: its kind, its size and its group's size.

gloo runs a collective on one of its group's ``pt_gloo_runloop`` threads, as a ``gloo:<op>``
range whose ``Input Dims`` is the tensor it sends; the training thread holds the op that
issued it (``c10d::_allgather_base_``, ``c10d::_reduce_scatter_base_``, ``c10d::allreduce_``
...) with its output and input. gloo has no reduce-scatter of its own: it runs one as
``gloo:all_reduce`` of the whole input, so the kind comes from the issuing op. Each gloo op is
tied to the earliest op not yet tied, issued no later than it starts, of a kind it can run and
with the tensor it sends among the op's first two (a group's work runs in the order it was
issued). The issuing op then gives:

* the kind (a reduce-scatter is one however gloo runs it);
* the size as nccl-tests counts it (the gathered output of an all-gather, the input of the
  others), in the gloo op's element type;
* the group's size: output / input of an all-gather, input / output of a reduce-scatter.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.arrays import IntArray
from overlapscope.phases import CollectiveKind

AG, RS, AR = (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE)
# c10d op -> (its kind, which input is its output: 0 first / 1 second / -1 none)
ISSUING: dict[str, tuple[CollectiveKind, int]] = {
    "c10d::_allgather_base_": (AG, 0),
    "c10d::allgather_into_tensor_coalesced_": (AG, 0),
    "c10d::_reduce_scatter_base_": (RS, 0),
    "c10d::reduce_scatter_tensor_coalesced_": (RS, 0),
    "c10d::allreduce_": (AR, -1),
    "c10d::allreduce_coalesced_": (AR, -1),
    "c10d::broadcast_": (CollectiveKind.BROADCAST, -1),
    "c10d::alltoall_base_": (CollectiveKind.ALL_TO_ALL, 0),
}
# what each gloo op may have been issued as
_RUNS_AS = {AG.value: (AG,), AR.value: (AR, RS)}


@dataclass(frozen=True, slots=True)
class Issued:
    """Per gloo row (in the order given): the issuing op's row (-1: none found), its kind
    (None), its size in bytes (-1) and its group's size (-1: the op does not say)."""

    row: IntArray
    kind: np.ndarray
    nbytes: IntArray
    group_size: IntArray


def _counts(comm_args: pd.DataFrame, rows: IntArray) -> tuple[np.ndarray, np.ndarray]:
    args = comm_args.reindex(rows)
    return (
        args["first_numel"].fillna(-1).to_numpy(dtype=np.int64),
        args["second_numel"].fillna(-1).to_numpy(dtype=np.int64),
    )


def link(
    comm_args: pd.DataFrame,
    names: list[str],
    ts: np.ndarray,
    gloo_rows: IntArray,
    gloo_kinds: np.ndarray,
    op_rows: IntArray,
) -> Issued:
    """Tie each gloo row to its issuing op among ``op_rows`` (rows whose name is in
    :data:`ISSUING`, on the issuing threads); ``names``: every row's name, ``gloo_kinds``:
    each gloo row's kind as gloo names it."""
    n = len(gloo_rows)
    out = Issued(np.full(n, -1, np.int64), np.full(n, None, object),
                 np.full(n, -1, np.int64), np.full(n, -1, np.int64))  # fmt: skip
    if not n or not len(op_rows):
        return out
    op_rows = op_rows[np.argsort(ts[op_rows], kind="stable")]
    first, second = _counts(comm_args, op_rows)
    queues: dict[tuple[str, int], deque[int]] = {}
    for i, r in enumerate(op_rows.tolist()):
        kind, _ = ISSUING[names[r]]
        for numel in {first[i], second[i]} - {-1}:
            queues.setdefault((kind.value, int(numel)), deque()).append(i)
    g_numel, _ = _counts(comm_args, gloo_rows)
    g_bytes = comm_args.reindex(gloo_rows)["dims_bytes"].fillna(-1).to_numpy(dtype=np.int64)
    taken = np.zeros(len(op_rows), dtype=bool)
    for j in np.argsort(ts[gloo_rows], kind="stable").tolist():
        best = -1
        for kind in _RUNS_AS.get(str(gloo_kinds[j]), ()):
            q = queues.get((kind.value, int(g_numel[j])))
            while q and taken[q[0]]:
                q.popleft()
            if q and ts[op_rows[q[0]]] <= ts[gloo_rows[j]] and (best < 0 or q[0] < best):
                best = q[0]
        if best < 0:
            continue
        taken[best] = True
        _fill(out, j, best, op_rows[best], names, (first[best], second[best]))
        elem = g_bytes[j] // g_numel[j] if g_numel[j] > 0 and g_bytes[j] > 0 else -1
        out.nbytes[j] = _buffer_numel(names[op_rows[best]], first[best], second[best]) * elem
    out.nbytes[out.nbytes <= 0] = -1
    return out


def _buffer_numel(name: str, first: int, second: int) -> int:
    """The elements nccl-tests counts: the output of an all-gather, the input otherwise."""
    kind, out_at = ISSUING[name]
    if kind is AG:
        return max(first, second)
    if out_at == 0 and second > 0:
        return second  # (output, input): the input
    return first


def _fill(out: Issued, j: int, i: int, row: int, names: list[str], sizes: tuple[int, int]) -> None:
    kind, out_at = ISSUING[names[row]]
    out.row[j], out.kind[j] = row, kind.value
    first, second = sizes
    if out_at == 0 and first > 0 and second > 0:
        big, small = max(first, second), min(first, second)
        if big % small == 0 and kind in (AG, RS):
            out.group_size[j] = big // small
