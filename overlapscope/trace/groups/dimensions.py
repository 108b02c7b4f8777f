"""Which parallel dimension each process group serves, and the phases that follow from it.

A group of part of the job (trace/groups/assign.py names it ``<desc>[<ranks>]``) says its dimension
by its description, as torch's ``DeviceMesh`` names its groups ``mesh_<dim name>``, and by
what it runs:

* ``tp`` (``tp``, ``tensor``): tensor parallel;
* ``hsdp_replicate`` (``replicate``, or ``dp_replicate``): HSDP's replicas, where the rank
  also has a group that all-gathers and reduce-scatters (FSDP's shard group); ``ddp``
  otherwise;
* ``fsdp_shard`` (``shard``, ``dp_shard``, ``fsdp``; or ``dp`` that all-gathers or
  reduce-scatters); ``ddp`` (``dp``, ``ddp`` that only all-reduces);
* ``pp`` (``pp``, ``pipeline``), ``ep`` (``ep``, ``expert``), ``cp`` (``cp``, ``context``).

A group of the whole job keeps the dimension its collectives' phases give (``whole``).

Phases: HSDP's replicate all-reduce, which FSDP issues inside its reduce-scatter's range, is
``ar_rep`` (beside ``rs``); a TP collective is ``tp_fwd`` / ``tp_bwd`` of the block whose
forward or backward holds it: the unit and phase of the last compute before it on the
training threads (where it was issued, the block waits for it).
"""

from __future__ import annotations

import re

import numpy as np

from overlapscope.phases import CollectiveKind, Phase
from overlapscope.trace.attribution import Labels, RowContext
from overlapscope.trace.groups.assign import parse_label

DIMENSIONS = ("fsdp_shard", "hsdp_replicate", "tp", "ddp", "pp", "ep", "cp", "whole")
_WORDS = [
    ("tp", re.compile(r"(^|_)(tp|tensor)($|_)")),
    ("replicate", re.compile(r"replicate")),
    ("fsdp_shard", re.compile(r"(^|_)(shard|fsdp|dp_shard)($|_)")),
    ("dp", re.compile(r"(^|_)(dp|ddp|data)($|_)")),
    ("pp", re.compile(r"(^|_)(pp|pipeline)($|_)")),
    ("ep", re.compile(r"(^|_)(ep|expert|moe)($|_)")),
    ("cp", re.compile(r"(^|_)(cp|context)($|_)")),
]
_SHARDING = {CollectiveKind.ALL_GATHER.value, CollectiveKind.REDUCE_SCATTER.value}


def dimension(desc: str, kinds: set[str], rank_shards: bool) -> str:
    """The dimension of a group described ``desc`` that ran ``kinds`` on a rank that
    (``rank_shards``) also has a group all-gathering or reduce-scattering."""
    text = desc.lower()
    for dim, pattern in _WORDS:
        if pattern.search(text):
            if dim == "replicate":
                return "hsdp_replicate" if rank_shards else "ddp"
            if dim == "dp":
                return "fsdp_shard" if kinds & _SHARDING else "ddp"
            return dim
    return "fsdp_shard" if kinds & _SHARDING else "ddp"


def group_dimensions(groups: np.ndarray, kinds: np.ndarray) -> dict[str, str]:
    """The dimension of each group of one rank's collective rows (``groups``, ``kinds``)."""
    ran: dict[str, set[str]] = {}
    for g, k in zip(groups.tolist(), kinds.tolist(), strict=True):
        if isinstance(g, str):
            ran.setdefault(g, set()).add(str(k))
    parsed = {g: parse_label(g) for g in ran}
    shards = any(
        ran[g] & _SHARDING and (p is None or dimension(p[0], ran[g], False) != "tp")
        for g, p in parsed.items()
    )
    return {g: "whole" if p is None else dimension(p[0], ran[g], shards) for g, p in parsed.items()}


def label(ctx: RowContext, out: Labels, waits: np.ndarray) -> None:
    """Relabel one rank's collectives by their group's dimension (module doc), in place;
    ``waits``: the rows of waits on a collective (labels.WAIT_OP_RE), which on a rank with
    a TP group and no phase of their own are TP's (``tp_fwd.wait`` ...)."""
    comm = ctx.comm_rows
    if not len(comm):
        return
    dims = group_dimensions(out.group[comm], out.kind[comm])
    dim = np.asarray([dims.get(g, "whole") if isinstance(g, str) else "whole"
                      for g in out.group[comm].tolist()], dtype=object)  # fmt: skip
    phase = out.phase[comm]
    either = np.asarray([p is None or p == Phase.RS.value for p in phase.tolist()], dtype=bool)
    replica = comm[(dim == "hsdp_replicate") & either]
    out.phase[replica] = Phase.AR_REP.value
    tp = comm[dim == "tp"]
    if len(tp):
        _tp_phases(ctx, out, tp)
        bare = waits[np.asarray([p is None for p in out.phase[waits].tolist()], dtype=bool)]
        if len(bare):
            _tp_phases(ctx, out, bare, wait=True)


def _tp_phases(ctx: RowContext, out: Labels, tp: np.ndarray, wait: bool = False) -> None:
    """Each TP collective's block and phase: those of the last compute row of a block's
    forward or backward on the training threads before it was issued (its anchor)."""
    fwd, bwd = Phase.FWD.value, Phase.BWD.value
    phases = np.asarray([p in (fwd, bwd) for p in out.phase.tolist()], dtype=bool)
    units = np.asarray([u is not None for u in out.unit.tolist()], dtype=bool)
    held = np.flatnonzero(phases & units & ~ctx.on_gpu & ~ctx.on_gloo_thread)
    if not len(held):
        return
    held = held[np.argsort(ctx.ts[held], kind="stable")]
    at = np.searchsorted(ctx.ts[held], ctx.anchor_ts[tp], side="right") - 1
    ok = at >= 0
    src = held[at[ok]]
    rows = tp[ok]
    out.unit[rows] = out.unit[src]
    back, fore = Phase.TP_BWD, Phase.TP_FWD
    if wait:
        back, fore = back.wait, fore.wait
    out.phase[rows] = np.where(out.phase[src] == bwd, back.value, fore.value)
