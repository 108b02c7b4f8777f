"""Fold the engine's point-to-point collectives into one transfer event each.

On gloo, overlapscope's engine builds all-gather and reduce-scatter from ``send``/``recv``
(``overlapscope/engine/p2p.py``). gloo records each as a ``gloo:send`` / ``gloo:recv`` event
on the thread that issued it, from the issue (inside the engine's ``ovs/<phase>/<unit>``
issue range) to the moment the engine's waiter thread saw it complete. One collective is
therefore ``2 (N - 1)`` events that start together inside one issue range.

:func:`fold_p2p` replaces them by one event per issue range:

- name ``gloo:send/recv (<kind>)``, category :data:`P2P_CAT`; the kind follows the range's
  phase (``ag_*`` all-gather, ``rs`` reduce-scatter, ``ar`` all-reduce);
- end: the last of its sends and receives to complete;
- start: its issue, or the end of the previous folded collective of the thread if that is
  later. Sends and receives move in posting order on every peer connection, so a collective
  issued while an earlier one is still in flight queues behind it: its transfer starts when
  the earlier one ends, as on one NCCL stream (and as the engine's former one-thread gloo
  group showed it);
- size: the full buffer, ``N x`` the bytes its sends in the range carry (the first ring
  round: the shard of an all-gather, one chunk of a reduce-scatter, possibly in pieces; its
  receives where a staged collective's sends are not in the trace), carried as ``Out msg nelems`` with ``dtype`` ``uint8`` (a byte count), where an NCCL
  kernel carries its element count.

Sends and receives outside any issue range (e.g. a user's own point-to-point traffic) are
left as they are.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from overlapscope.arrays import FloatArray, IntArray
from overlapscope.phases import COMM_PHASES
from overlapscope.trace.attribution import innermost_on_threads
from overlapscope.trace.naming.ranges import parse_range
from overlapscope.trace.read.parse import RawTrace

P2P_NAMES = ("gloo:send", "gloo:recv")
P2P_CAT = "gloo_p2p"


def _kind_by_category(categories: pd.Index) -> list[str | None]:
    """The collective kind of every name that is an overlapscope issue range, else None
    (classified once per distinct name, not per row)."""
    out: list[str | None] = []
    for name in map(str, categories):
        r = parse_range(name) if name.startswith("ovs/") else None
        issues = r is not None and r.phase in COMM_PHASES
        out.append(r.phase.kinds[0].value if r is not None and issues else None)
    return out


def _holders(raw: RawTrace) -> tuple[IntArray, IntArray, list[str], IntArray] | None:
    """(p2p rows, issue rows, the issue rows' kinds, per p2p row the index into the issue
    rows of the range holding it or -1); None when nothing is to fold."""
    ev = raw.events
    names = ev["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    categories = names.cat.categories
    codes = names.cat.codes.to_numpy()
    cpu = ~ev["on_gpu"].to_numpy()
    p2p = np.flatnonzero(np.isin(codes, np.flatnonzero(categories.isin(P2P_NAMES))) & cpu)
    if len(p2p) == 0:
        return None
    kind_of = _kind_by_category(categories)
    is_issue = np.asarray([k is not None for k in kind_of], dtype=bool)
    issue = np.flatnonzero(is_issue[codes] & cpu) if len(categories) else p2p[:0]
    if len(issue) == 0:
        return None
    kinds = [str(kind_of[c]) for c in codes[issue]]
    ts = ev["ts_us"].to_numpy()
    end = ts + ev["dur_us"].to_numpy()
    tid = ev["tid"].to_numpy()
    holder = innermost_on_threads(ts[issue], end[issue], tid[issue], ts[p2p], tid[p2p])
    if not (holder >= 0).any():
        return None
    return p2p, issue, kinds, holder


def _transfers(raw: RawTrace, p2p: IntArray, issue: IntArray, holder: IntArray) -> pd.DataFrame:
    """One row per issue range holding sends or receives (index: its position in
    ``issue``), ordered by thread then start: ``tid, start, end, send_bytes`` of its folded
    transfer. Computed on arrays: a pandas groupby per aggregate cost ~5 ms a rank of the
    engine's 56 MB traces, more than the rest of the fold (measured)."""
    ev = raw.events
    held = holder >= 0
    rows, key = p2p[held], holder[held]
    ts = ev["ts_us"].to_numpy()[rows]
    end = ts + ev["dur_us"].to_numpy()[rows]
    dims = raw.comm_args["dims_bytes"].reindex(rows).fillna(-1).to_numpy(dtype=np.float64)
    is_send = ev["name"].iloc[rows].astype(str).to_numpy() == "gloo:send"
    # Per issue range (its rows gathered, in their order): the first start, the last end and
    # its sends' bytes (integers: exact in any order).
    order = np.argsort(key, kind="stable")
    ranges, first = np.unique(key[order], return_index=True)
    start = np.minimum.reduceat(ts[order], first)
    last = np.maximum.reduceat(end[order], first)
    send_bytes = np.add.reduceat(np.where(is_send, dims, 0.0)[order], first)
    # Staged collectives (device buffers through host memory) post their sends on the
    # engine's unprofiled lane thread: only the receives are in the trace. A ring round
    # receives what it sends, so their bytes stand in.
    recv_bytes = np.add.reduceat(np.where(is_send, 0.0, dims)[order], first)
    send_bytes = np.where(send_bytes > 0, send_bytes, recv_bytes)
    tid = ev["tid"].to_numpy()[issue[ranges]]
    by_thread = np.lexsort((start, tid))  # stable: ranges in order on equal starts
    ranges, start, last = ranges[by_thread], start[by_thread], last[by_thread]
    tid, send_bytes = tid[by_thread], send_bytes[by_thread]
    # Stream order: a collective's transfer starts once the previous one of its thread ended.
    prev_end = np.full(len(ranges), -np.inf)
    for t in np.unique(tid):
        on_t = np.flatnonzero(tid == t)
        prev_end[on_t[1:]] = np.maximum.accumulate(last[on_t])[:-1]
    begin = np.minimum(np.maximum(start, prev_end), last)
    return pd.DataFrame(
        {"start": begin, "end": last, "send_bytes": send_bytes, "tid": tid},
        index=pd.Index(ranges, name="issue"),
    )


def _folded_args(
    args: pd.DataFrame, keep: IntArray, kind: list[str], send_bytes: FloatArray, world_size: int
) -> pd.DataFrame:
    """comm_args: old rows re-indexed to their new positions, plus one row per folded event."""
    # ``keep`` is sorted: an old row's new position is where it lies in it (a lookup table
    # over every kept event cost more than the rest of the fold's argument rows).
    old = args.index.to_numpy()
    pos = np.searchsorted(keep, old)
    found = pos < len(keep)
    found[found] = keep[pos[found]] == old[found]
    kept_args = args[found].set_axis(pos[found], axis=0)
    full_bytes = np.where(np.isfinite(send_bytes), send_bytes * max(world_size, 1), np.nan)
    folded_args = pd.DataFrame(
        {
            "coll_name": pd.Series(kind, dtype=object),
            "in_nelems": np.nan,
            "out_nelems": full_bytes,  # counted in bytes: dtype uint8
            "dtype": pd.Series(["uint8"] * len(kind), dtype=object),
            "group_size": float(world_size),
            "pg_name": pd.Series([None] * len(kind), dtype=object),
            "pg_desc": pd.Series([None] * len(kind), dtype=object),
            "pg_ranks": pd.Series([None] * len(kind), dtype=object),
            "seq_arg": np.nan,
            "dims_bytes": np.full(len(kind), -1, dtype=np.int64),
            "first_bytes": np.full(len(kind), -1, dtype=np.int64),
            "first_numel": np.full(len(kind), -1, dtype=np.int64),
            "second_numel": np.full(len(kind), -1, dtype=np.int64),
        }
    )
    folded_args.index = pd.Index(np.arange(len(keep), len(keep) + len(kind)), dtype=np.int64)
    comm_args = pd.concat([kept_args, folded_args[kept_args.columns]])
    for c in ("dims_bytes", "first_bytes", "first_numel", "second_numel"):
        comm_args[c] = comm_args[c].astype(np.int64)
    return comm_args


def _joined_strings(kept: pd.Categorical, added: list[str]) -> pd.Categorical:
    """:func:`_joined` of string categories, by codes: the categories used, sorted, then
    every code looked up once (union_categoricals and the removal of the unused categories
    each went through every row)."""
    codes = np.asarray(kept.codes, dtype=np.int64)
    used = np.zeros(len(kept.categories), dtype=bool)
    used[codes[codes >= 0]] = True
    present = kept.categories.tolist()
    cats = sorted({c for c, u in zip(present, used.tolist(), strict=True) if u} | set(added))
    index = {c: i for i, c in enumerate(cats)}
    lookup = np.asarray([index.get(c, -1) for c in present] + [-1], dtype=np.int64)
    new = np.asarray([index[v] for v in added], dtype=np.int64)
    return pd.Categorical.from_codes(np.concatenate([lookup[codes], new]), categories=cats)


def _joined(kept: pd.Categorical, added: pd.Series) -> pd.Categorical:
    """``kept`` then ``added`` as one categorical whose categories are the values present,
    sorted (as pandas makes them of the values), from the codes: no value is hashed again."""
    values = added.tolist()
    if kept.categories.dtype == "str" and all(type(v) is str for v in values):
        return _joined_strings(kept, values)
    try:
        both = union_categoricals([kept, pd.Categorical(added)], sort_categories=True)
    except TypeError:  # the categories' dtypes differ (odd values): pandas reads the values
        return pd.Categorical(
            np.concatenate([np.asarray(kept, dtype=object), added.to_numpy(dtype=object)])
        )
    return both.remove_unused_categories()


def fold_p2p(raw: RawTrace, world_size: int) -> RawTrace:
    """``raw`` with every issue range's sends and receives folded into one event."""
    found = _holders(raw)
    if found is None:
        return raw
    p2p, issue, kinds, holder = found
    agg = _transfers(raw, p2p, issue, holder)
    kind = [kinds[i] for i in agg.index.to_numpy()]
    ev = raw.events
    folded = pd.DataFrame(
        {
            "tid": agg["tid"].to_numpy(),
            "stream": -1,
            "on_gpu": False,
            "cat": P2P_CAT,
            "name": [f"gloo:send/recv ({k})" for k in kind],
            "ts_us": agg["start"].to_numpy(),
            "dur_us": agg["end"].to_numpy() - agg["start"].to_numpy(),
            "correlation": -1,
        }
    )
    kept = np.ones(len(ev), dtype=bool)
    kept[p2p[holder >= 0]] = False
    keep = np.flatnonzero(kept)
    columns: dict[str, object] = {}
    for col in ev.columns:  # the kept rows then the folded ones, in the parser's dtypes
        if col in ("cat", "name"):
            columns[col] = _joined(ev[col].array[keep], folded[col])
        else:
            added = folded[col].to_numpy().astype(ev[col].dtype)
            columns[col] = np.concatenate([ev[col].to_numpy()[keep], added])
    events = pd.DataFrame(columns, copy=False)  # new arrays: not copied again
    comm_args = _folded_args(raw.comm_args, keep, kind, agg["send_bytes"].to_numpy(), world_size)
    # issue rows are kept: their new position is where they lie in `keep`
    issue_rows = np.searchsorted(keep, issue[agg.index.to_numpy()])
    folded_rows = np.arange(len(keep), len(keep) + len(agg), dtype=np.int64)
    return dataclasses.replace(
        raw, events=events, comm_args=comm_args, folded_issue=(folded_rows, issue_rows)
    )
