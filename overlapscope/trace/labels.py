"""Phase recognition: small documented mappings from event names to lanes, phases and units.

Four vocabularies, tried in this order on every event name:

1. overlapscope's own ranges, ``ovs/<phase>/<unit>`` (:mod:`overlapscope.trace.names`).
2. torch FSDP2 (``fully_shard``) ranges, :data:`FSDP2_LABELS`:
   ``FSDP::all_gather (<fqn>)`` and ``FSDP::post_backward_reduce (<fqn>)`` issue a collective
   of unit ``<fqn>``; the context ranges around them (``FSDP::pre_forward``,
   ``FSDP::forward_prefetch for <fqn>`` / ``FSDP::pre_backward``, ``FSDP::backward_prefetch
   for <fqn>``, ...) tell a forward all-gather from a backward one.
3. torch FSDP1 (``FullyShardedDataParallel``) ranges, :data:`FSDP1_LABELS`: the label holding a
   collective gives its phase; FSDP1 labels carry no module name, so units are named
   ``unit<k>`` in the order of the forward all-gathers of a step, and backward all-gathers and
   reduce-scatters take them in reverse order (static graph, as FSDP1 itself assumes).
4. generic: NCCL kernels (``^nccl.*Kernel``, HTA's rule) are communication, ``Memcpy`` /
   ``Memset`` / ``dma`` are memory, other GPU activities are compute unless their name marks a
   sync (HTA's classes); ``gloo:<op>`` CPU ranges are communication; ``c10d::*``,
   ``record_param_comms`` and ``nccl:*`` CPU ops are issue ranges. The collective kind comes
   from the ``Collective name`` argument when present, else from the name.
"""

from __future__ import annotations

import enum
import re

from overlapscope.trace.names import Phase, parse_range
from overlapscope.trace.schema import CollectiveKind

NCCL_KERNEL_RE = re.compile(r"^nccl.*Kernel")
MEMORY_RE = re.compile(r"^(Memcpy|Memset|dma)")
# HTA's "not compute" rule for GPU activities (NCCL, copies, sync kernels).
GPU_NON_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*Memcpy)|(^Memset)|(.*Sync)")
STEP_RE = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")
ISSUE_OP_RE = re.compile(r"^(c10d::|record_param_comms$|nccl:)")
GLOO_PREFIX = "gloo:"
# The CPU op c10d records around each collective it issues, with its arguments.
PARAM_COMMS = "record_param_comms"
# c10d's range around an NCCL collective's launch (``nccl:all_to_all``): it names the op.
NCCL_RANGE_PREFIX = "nccl:"


class LabelRole(enum.Enum):
    """What a framework range means for the collectives that run inside it."""

    ISSUE_AG = "issue_ag"  # an all-gather of the named unit (phase from the context)
    ISSUE_AG_FWD = "issue_ag_fwd"
    ISSUE_AG_BWD = "issue_ag_bwd"
    ISSUE_RS = "issue_rs"
    CONTEXT_FWD = "context_fwd"
    CONTEXT_BWD = "context_bwd"
    LIMITER = "limiter"


FSDP2_LABELS: dict[str, LabelRole] = {
    "all_gather": LabelRole.ISSUE_AG,
    "post_backward_reduce": LabelRole.ISSUE_RS,
    "pre_forward": LabelRole.CONTEXT_FWD,
    "forward_prefetch": LabelRole.CONTEXT_FWD,
    "post_forward": LabelRole.CONTEXT_FWD,
    "root_pre_forward": LabelRole.CONTEXT_FWD,
    "pre_backward": LabelRole.CONTEXT_BWD,
    "backward_prefetch": LabelRole.CONTEXT_BWD,
    "post_backward_accumulate": LabelRole.CONTEXT_BWD,
    "post_backward_reshard": LabelRole.CONTEXT_BWD,
    "post_backward_rs_wait": LabelRole.CONTEXT_BWD,
    "root_post_backward_callback": LabelRole.CONTEXT_BWD,
}

FSDP1_LABELS: dict[str, LabelRole] = {
    "_pre_forward": LabelRole.ISSUE_AG_FWD,
    "_pre_forward_prefetch": LabelRole.ISSUE_AG_FWD,
    "_pre_backward_hook": LabelRole.ISSUE_AG_BWD,
    "_pre_backward_prefetch": LabelRole.ISSUE_AG_BWD,
    "_post_backward_prefetch": LabelRole.ISSUE_AG_BWD,
    "_post_backward_hook": LabelRole.ISSUE_RS,
    "rate_limiter": LabelRole.LIMITER,
}

_FSDP2_RE = re.compile(
    r"^FSDP::(?P<label>[a-z_]+)(?: \((?P<fqn>[^()]*)\)| for (?P<target>\S*))?(?: \[pg=\d+\])?$"
)
_FSDP1_PREFIX = "FullyShardedDataParallel."


def parse_fsdp2(name: str) -> tuple[LabelRole, str | None] | None:
    """``FSDP::all_gather (layers.0)`` -> (ISSUE_AG, "layers.0"); None if not an FSDP2 label.
    The root module's empty fqn becomes ``root``."""
    m = _FSDP2_RE.match(name)
    if m is None:
        return None
    role = FSDP2_LABELS.get(m.group("label"))
    if role is None:
        return None
    fqn = m.group("fqn") if m.group("fqn") is not None else m.group("target")
    if fqn is not None:
        fqn = fqn.replace("/", ".") or "root"
    return role, fqn


def parse_fsdp1(name: str) -> LabelRole | None:
    if not name.startswith(_FSDP1_PREFIX):
        return None
    return FSDP1_LABELS.get(name[len(_FSDP1_PREFIX) :])


def collective_kind(text: str) -> CollectiveKind:
    """Kind of a collective from a kernel name (``ncclDevKernel_AllGather_RING_LL``), a gloo op
    (``gloo:all_reduce``) or a ``Collective name`` argument (``_reduce_scatter_base``)."""
    s = text
    for prefix in ("ncclKernel_", "ncclDevKernel_"):
        if s.startswith(prefix):
            s = s[len(prefix) :].split("_", 1)[0]
    for prefix in (GLOO_PREFIX, NCCL_RANGE_PREFIX):
        if s.startswith(prefix):
            s = s[len(prefix) :]
    s = re.sub(r"[^a-z]", "", s.lower())
    if "allgather" in s:
        return CollectiveKind.ALL_GATHER
    if "reducescatter" in s:
        return CollectiveKind.REDUCE_SCATTER
    if "allreduce" in s:
        return CollectiveKind.ALL_REDUCE
    if "alltoall" in s:
        return CollectiveKind.ALL_TO_ALL
    if "broadcast" in s:
        return CollectiveKind.BROADCAST
    if s == "send":
        return CollectiveKind.SEND
    if s == "recv":
        return CollectiveKind.RECV
    if "sendrecv" in s:
        return CollectiveKind.SEND_RECV
    if "barrier" in s:
        return CollectiveKind.BARRIER
    if s == "reduce":
        return CollectiveKind.REDUCE
    return CollectiveKind.OTHER


def expected_kinds(phase: Phase) -> tuple[CollectiveKind, ...]:
    """Collective kinds the backend may run for an overlapscope issue phase, the phase's own
    kind first (earlier engine versions ran a gloo reduce-scatter as an all-reduce)."""
    match phase:
        case Phase.AG_FWD | Phase.AG_BWD:
            return (CollectiveKind.ALL_GATHER,)
        case Phase.RS:
            return (CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE)
        case Phase.AR:
            return (CollectiveKind.ALL_REDUCE,)
        case _:
            raise ValueError(f"phase {phase.value!r} issues no collective")


__all__ = [
    "FSDP1_LABELS",
    "FSDP2_LABELS",
    "LabelRole",
    "collective_kind",
    "expected_kinds",
    "parse_fsdp1",
    "parse_fsdp2",
    "parse_range",
]
