"""Which process group each collective ran in, from whatever the trace has.

In this order (docs/ANALYSIS.md, "Process groups, dimensions and matching"):

1. ``record_param_comms``'s ``Process Group Name`` / ``Desc`` / ``Ranks`` (NCCL traces);
2. the header's ``distributedInfo.pg_config`` (each group's name, description and ranks),
   tied to
3. the threads the collectives run on: each gloo group runs its work on its own
   ``pt_gloo_runloop`` threads, made together when the group is made, so a group's threads
   have neighbouring ids and the groups' threads come in the order the groups were made
   (the order of ``pg_config``); NCCL runs each communicator on a CUDA stream of its own,
   so a rank's NCCL streams that ``record_param_comms`` did not name are its groups in the
   same order (:func:`nccl_labels`; without ``pg_config``, each stream a group by what it
   runs: trace/groups/streams.py); and
4. the issuing ``c10d::`` op's sizes (trace/groups/issuing.py: the group's size of an all-gather or
   a reduce-scatter), which must agree with the group a thread is given.

A group of every rank of the job keeps the name it had before (the backend, or
``record_param_comms``'s name): matching is the same whichever it is. A group of part of the
job is named ``<desc>[<ranks>]`` (``mesh_replicate[0,2]``): one name for one group on every
rank. Where nothing tells the groups apart, every collective is one group of the whole job,
and a warning says so.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from overlapscope.arrays import FloatArray, IntArray, ObjArray
from overlapscope.phases import CollectiveKind
from overlapscope.trace.attribution import Labels, RowContext
from overlapscope.trace.groups.issuing import ISSUING, link
from overlapscope.trace.groups.streams import by_signature
from overlapscope.trace.read.comm_args import GLOO_GROUP, NCCL_GROUP
from overlapscope.trace.read.header import PgEntry

# gloo makes this many runloop threads per group (one device: torch's default)
THREADS_PER_GROUP = 2
_LABEL_RE = re.compile(r"^(?P<desc>.*)\[(?P<ranks>\d+(?:,\d+)*)\]$")
DEFAULT_DESC = "default_pg"
_P2P = [k.value for k in (CollectiveKind.SEND, CollectiveKind.RECV, CollectiveKind.SEND_RECV)]


def label(desc: str | None, name: str, ranks: Sequence[int]) -> str:
    """A group's name in the ``group`` column: ``<desc>[<ranks>]``."""
    shown = desc if desc and desc != "undefined" else f"pg{name}"
    return f"{shown}[{','.join(map(str, sorted(ranks)))}]"


def parse_label(text: object) -> tuple[str, tuple[int, ...]] | None:
    """(description, ranks) of a group named by :func:`label`; None for another name (a
    group of the whole job)."""
    m = _LABEL_RE.match(text) if isinstance(text, str) else None
    if m is None:
        return None
    return m.group("desc"), tuple(int(r) for r in m.group("ranks").split(","))


def whole(ranks: Sequence[int], world_size: int) -> bool:
    return tuple(sorted(ranks)) == tuple(range(world_size))


def param_comms_labels(
    names: ObjArray, descs: ObjArray, ranks: ObjArray, world_size: int
) -> ObjArray:
    """The group of collectives whose issuing ``record_param_comms`` names it (None where
    it does not, or names a group of the whole job: their name stays)."""
    out = np.full(len(names), None, dtype=object)
    for i, (n, d, r) in enumerate(zip(names.tolist(), descs.tolist(), ranks.tolist(),
                                      strict=True)):  # fmt: skip
        if isinstance(r, str) and isinstance(n, str) and n:
            members = [int(x) for x in r.split(",")]
            if not whole(members, world_size):
                out[i] = label(d if isinstance(d, str) else None, n, members)
    return out


def thread_clusters(tids: IntArray, sizes: IntArray, work: ObjArray) -> list[list[int]]:
    """The gloo threads (``tids``, with the group size each one's issuing op gave, -1
    unknown, and ``work``: what each ran, its kind and size) in clusters of one group each,
    in id order: a thread joins the cluster before it where that has fewer than
    :data:`THREADS_PER_GROUP` threads, ran some of the same work (a group's threads take its
    work from one queue) and no known size differs."""
    known: dict[int, set[int]] = {}
    ran: dict[int, set[object]] = {}
    for t, s, w in zip(tids.tolist(), sizes.tolist(), work.tolist(), strict=True):
        known.setdefault(t, set())
        ran.setdefault(t, set()).add(w)
        if s > 0:
            known[t].add(s)
    out: list[list[int]] = []
    for t in sorted(known):
        last = out[-1] if out else None
        if last is None or len(last) >= THREADS_PER_GROUP:
            out.append([t])
            continue
        sizes_there = set().union(*(known[x] for x in last))
        shared = bool(ran[t] & set().union(*(ran[x] for x in last)))
        if shared and not (known[t] and sizes_there and known[t] != sizes_there):
            last.append(t)
        else:
            out.append([t])
    return out


def assign(
    clusters: list[list[int]], sizes: dict[int, set[int]], groups: Sequence[PgEntry]
) -> list[PgEntry] | None:
    """The group of each cluster (in id order), in ``pg_config``'s order: the choice whose
    sizes agree with what the issuing ops say, using the job's default group least, then the
    latest made; None when no choice agrees."""
    best: tuple[int, int] | None = None
    chosen: list[PgEntry] | None = None
    for combo in itertools.combinations(range(len(groups)), len(clusters)):
        ok = all(
            s == len(groups[g].ranks)
            for c, g in zip(clusters, combo, strict=True)
            for t in c
            for s in sizes.get(t, ())
        )
        if not ok:
            continue
        score = (sum(groups[g].desc == DEFAULT_DESC for g in combo), -sum(combo))
        if best is None or score < best:
            best, chosen = score, [groups[g] for g in combo]
    return chosen


def nothing_known(world: int, num_collectives: int) -> str:
    """The warning of a job whose collectives are one group of the whole job for want of
    anything that names its groups."""
    return (
        "no process groups in the trace (no pg_config in distributedInfo, no "
        f"record_param_comms group): every collective ({num_collectives} on this rank) is "
        f"taken as one group of all {world} ranks"
    )


def _order(groups: Sequence[PgEntry]) -> list[PgEntry]:
    return sorted(groups, key=lambda g: (0, int(g.name)) if g.name.isdigit() else (1, 0))


def gloo_labels(
    tids: IntArray,
    ran: tuple[IntArray, ObjArray],
    groups: Sequence[PgEntry],
    rank: int,
    world: int,
) -> tuple[dict[int, str], str | None]:
    """The group name of each gloo thread (``tids``: the thread of each gloo collective;
    ``ran``: the group size its issuing op says, -1 unknown, and its kind and size), and a
    warning (None: none).
    Threads of groups of the whole job are left out (their name stays)."""
    mine = _order([g for g in groups if rank in g.ranks and len(g.ranks) > 1])
    if not len(tids):
        return {}, None
    if not mine:
        if world > 1 and not groups:
            return {}, nothing_known(world, len(tids))
        return {}, None
    if all(whole(g.ranks, world) for g in mine):
        return {}, None
    group_sizes, work = ran
    clusters = thread_clusters(tids, group_sizes, work)
    sizes: dict[int, set[int]] = {}
    for t, s in zip(tids.tolist(), group_sizes.tolist(), strict=True):
        if s > 0:
            sizes.setdefault(t, set()).add(s)
    chosen = assign(clusters, sizes, mine)
    if chosen is None:
        return {}, (
            f"{len(clusters)} gloo thread groups do not fit the {len(mine)} process groups "
            "of pg_config: every gloo collective is taken as one group of the whole job"
        )
    out: dict[int, str] = {}
    for c, g in zip(clusters, chosen, strict=True):
        if not whole(g.ranks, world):
            out.update({t: label(g.desc, g.name, g.ranks) for t in c})
    return out, None


def nccl_labels(
    stream: IntArray,
    ran: tuple[ObjArray, IntArray, IntArray, IntArray],
    groups: Sequence[PgEntry],
    rank: int,
    world: int,
    num_unnamed: int | None = None,
) -> tuple[dict[int, str], str | None]:
    """The group name of each NCCL stream of one rank (``stream``: the stream of each NCCL
    collective that ``record_param_comms`` did not name, point-to-point left out; ``ran``:
    its kind, bytes, step and the group size its issuing op says, -1 unknown), and a
    warning (None: none): the
    streams in id order (the order their communicators were made) given the rank's groups
    of ``pg_config`` as :func:`assign` gives gloo's threads; else each stream a group by
    what it runs (trace/groups/streams.py). Streams of groups of the whole job are left out.
    ``num_unnamed``: the rank's NCCL collectives no group names, point-to-point included
    (the count of the warning that they are one group of the whole job; None: ``stream``'s)."""
    unnamed = len(stream) if num_unnamed is None else num_unnamed
    if not unnamed or world < 2:
        return {}, None
    streams = sorted(set(stream.tolist()))
    if len(streams) < 2:
        return {}, None if groups else nothing_known(world, unnamed)
    mine = _order([g for g in groups if rank in g.ranks and len(g.ranks) > 1])
    if mine and all(whole(g.ranks, world) for g in mine):
        return {}, None
    kinds, nbytes, steps, group_sizes = ran
    sizes: dict[int, set[int]] = {}
    for s, n in zip(stream.tolist(), group_sizes.tolist(), strict=True):
        if n > 0:
            sizes.setdefault(s, set()).add(n)
    chosen = assign([[s] for s in streams], sizes, mine) if len(mine) >= len(streams) else None
    if chosen is not None:
        return {
            s: label(g.desc, g.name, g.ranks)
            for s, g in zip(streams, chosen, strict=True)
            if not whole(g.ranks, world)
        }, None
    return by_signature(stream, (kinds, nbytes, steps), len(mine))


def _name_nccl_streams(
    ctx: RowContext,
    out: Labels,
    nbytes: IntArray,
    issued: pd.DataFrame,
    where: tuple[int, int, Sequence[PgEntry]],
) -> list[str]:
    """Name the group of the rank's NCCL collectives that no ``record_param_comms`` named
    by their streams (:func:`nccl_labels`, in place); returns the warnings."""
    comm = ctx.comm_rows
    # (point-to-point transfers keep theirs: a pair's send and receive run different work)
    unnamed = ctx.on_gpu[comm] & (out.group[comm] == NCCL_GROUP)
    pick = unnamed & ~np.isin(out.kind[comm], _P2P)
    rows = comm[pick]
    group_size = issued["group_size"].fillna(-1).to_numpy(dtype=np.int64)[pick]
    ran = (out.kind[rows], nbytes[rows], ctx.step[rows], group_size)
    rank, world, groups = where
    count = int(unnamed.sum())
    by_stream, warning = nccl_labels(ctx.tid[rows], ran, groups, rank, world, count)
    for s, name in by_stream.items():
        out.group[rows[ctx.tid[rows] == s]] = name
    return [warning] if warning else []


def apply(
    ctx: RowContext,
    out: Labels,
    nbytes: IntArray,
    comm_args: pd.DataFrame,
    names: tuple[list[str], IntArray],
    where: tuple[int, int, Sequence[PgEntry], IntArray],
    order: FloatArray,
) -> list[str]:
    """Name the group of every collective row of one rank in ``out.group`` (in place), and
    the kind and size of gloo's from their issuing op (``nbytes``, in place); returns the
    warnings. ``names``: the names by code and each row's code; ``where``: the rank, the
    world size, its ``pg_config`` and each collective's issuing ``record_param_comms`` row
    (-1: none). ``order``: each row's time for the order of its group's collectives (its
    start): a gloo collective's becomes its issuing op's (in place), as two threads of one
    group may start their work in either order, but the program issues it in one."""
    cats, codes = names
    rank, world, groups, param_comms = where
    comm = ctx.comm_rows
    issued = comm_args.reindex(param_comms)
    own = comm_args.reindex(comm)
    pick = [
        np.where(pd.notna(own[c].to_numpy(dtype=object)), own[c].to_numpy(dtype=object),
                 issued[c].to_numpy(dtype=object))
        for c in ("pg_name", "pg_desc", "pg_ranks")
    ]  # fmt: skip
    named = param_comms_labels(pick[0], pick[1], pick[2], world)
    has = pd.notna(named)
    out.group[comm[has]] = named[has]
    warnings = _name_nccl_streams(ctx, out, nbytes, issued, (rank, world, groups))
    row_names = np.asarray(cats, dtype=object)[codes[comm]] if len(comm) else np.empty(0, object)
    gloo = np.asarray([str(n).startswith("gloo:") for n in row_names], dtype=bool)
    gloo &= ~ctx.on_gpu[comm] & (out.group[comm] == GLOO_GROUP) & (ctx.issued_by[comm] < 0)
    rows = comm[gloo]
    if not len(rows):
        return warnings
    op_codes = [i for i, c in enumerate(cats) if c in ISSUING]
    ops = np.flatnonzero(np.isin(codes, op_codes) & ~ctx.on_gpu & ~ctx.on_gloo_thread)
    by_row = {int(r): cats[codes[r]] for r in ops.tolist()}
    linked = link(comm_args, by_row, ctx.ts, rows, out.kind[rows], ops)  # type: ignore[arg-type]
    found = linked.row >= 0
    out.kind[rows[found]] = linked.kind[found]
    order[rows[found]] = ctx.ts[linked.row[found]]
    sized = linked.nbytes > 0
    nbytes[rows[sized]] = linked.nbytes[sized]
    numel = comm_args.reindex(rows)["first_numel"].fillna(-1).to_numpy(dtype=np.int64)
    work = np.asarray([f"{k}:{n}" for k, n in zip(out.kind[rows], numel, strict=True)], object)
    ran = (linked.group_size, work)
    by_tid, warning = gloo_labels(ctx.tid[rows], ran, groups, rank, world)
    for t, name in by_tid.items():
        out.group[rows[ctx.tid[rows] == t]] = name
    return warnings + ([warning] if warning else [])
