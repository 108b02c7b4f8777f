"""NCCL's per-communicator streams as process groups, where nothing earlier names them.

The third rung of trace/groups/assign.py's order, for NCCL: each communicator runs its kernels
(``ncclDevKernel_*``, ``ncclKernel_*``) and copies on a CUDA stream of its own, made when
the communicator is, so a rank's NCCL streams in id order are its groups in the order they
were made. A trace without ``record_param_comms``'s group fields (older torch, a stripped
trace) still has them:

* with the header's ``pg_config``, the rank's streams (id order) are given the rank's groups
  (``pg_config``'s order) as gloo's threads are (groups.assign: the issuing op's ``Group
  size`` must agree), which says the group's ranks;
* without it, or where the streams do not fit the groups, each stream's collectives are one
  group named by what it runs (:func:`signature`: the same name on every rank whose stream
  ran the same collectives), matched across the ranks that have it; which ranks share the
  group is not known (a warning counts them). A rank of one NCCL stream keeps ``nccl``.
"""

from __future__ import annotations

import hashlib

from overlapscope.arrays import IntArray, ObjArray
from overlapscope.phases import CollectiveKind

NCCL_STREAM_PREFIX = "nccl:"
# kinds whose size may differ between the group's ranks (an expert-parallel all-to-all's
# tokens per rank): their kind alone is in the signature
_UNEVEN = frozenset({CollectiveKind.ALL_TO_ALL.value})


def signature(kinds: ObjArray, nbytes: IntArray, steps: IntArray) -> str:
    """The name of a stream's group from the ordered ``(kind, bytes)`` of its collectives
    in its first step (all of them where none is in a step; an all-to-all's kind only): its
    kinds, then a digest (``nccl:all_gather+reduce_scatter#3f2a9c``)."""
    in_step = steps[steps >= 0]
    pick = steps == in_step.min() if len(in_step) else steps == steps
    shape = [
        f"{k}:{'*' if k in _UNEVEN else b}"
        for k, b in zip(kinds[pick].tolist(), nbytes[pick].tolist(), strict=True)
    ]
    digest = hashlib.sha1("|".join(shape).encode(), usedforsecurity=False).hexdigest()[:6]
    seen = "+".join(dict.fromkeys(str(k) for k in kinds[pick].tolist()))
    return f"{NCCL_STREAM_PREFIX}{seen}#{digest}"


def by_signature(
    stream: IntArray, ran: tuple[ObjArray, IntArray, IntArray], num_groups: int
) -> tuple[dict[int, str], str]:
    """The group name of each NCCL stream of one rank by what it runs (``stream``: the
    stream of each NCCL collective that no earlier rung named; ``ran``: its kind, bytes and
    step; ``num_groups``: the rank's groups of more than one rank in ``pg_config``, which
    did not fit), and the warning that says so."""
    kinds, nbytes, steps = ran
    streams = sorted(set(stream.tolist()))
    out = {
        s: signature(kinds[stream == s], nbytes[stream == s], steps[stream == s]) for s in streams
    }
    why = "no record_param_comms group and no pg_config" if not num_groups else (
        f"pg_config's {num_groups} groups do not fit them"
    )  # fmt: skip
    return out, (
        f"{len(stream)} NCCL collectives on {len(streams)} streams ({why}): each stream's "
        "are one group, matched with the ranks whose stream ran the same collectives "
        f"({', '.join(sorted(set(out.values())))}); which ranks share each group is not known"
    )
