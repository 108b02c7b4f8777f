"""The generic naming rules: what an event's name says whatever framework wrote the trace.

Each rank's trace is read by one producer (``trace/producers/``: overlapscope's own ranges,
torch FSDP2, torch FSDP1, ...), whose rules name its own ranges' lanes, phases and units.
Every other name follows these rules: NCCL kernels (``^nccl.*Kernel``, HTA's rule) are
communication, ``Memcpy`` / ``Memset`` / ``dma`` are memory, other GPU activities are compute
unless their name marks a sync (HTA's classes); ``gloo:<op>`` CPU ranges are communication;
``c10d::*``, ``record_param_comms`` and ``nccl:*`` CPU ops are issue ranges;
``ProfilerStep#N`` marks step N. The collective kind comes from the ``Collective name``
argument when present, else from the name.
"""

from __future__ import annotations

import re

from overlapscope.phases import CollectiveKind

NCCL_KERNEL_RE = re.compile(r"^nccl.*Kernel")
MEMORY_RE = re.compile(r"^(Memcpy|Memset|dma)")
# HTA's "not compute" rule for GPU activities (NCCL, copies, sync kernels).
GPU_NON_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*Memcpy)|(^Memset)|(.*Sync)")
STEP_RE = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")
ISSUE_OP_RE = re.compile(r"^(c10d::|record_param_comms$|nccl:)")
GLOO_PREFIX = "gloo:"
# A thread waiting on a collective: functional collectives' wait (often nested in an op a
# tensor subclass dispatches: aten::add > PythonSubclass > wait_tensor), c10d's, Work.wait().
WAIT_OP_RE = re.compile(r"^(_?c10d_functional::wait_tensor|c10d::wait|.*Work\.wait\b)")
# The CPU op c10d records around each collective it issues, with its arguments.
PARAM_COMMS = "record_param_comms"
# c10d's range around an NCCL collective's launch (``nccl:all_to_all``): it names the op.
NCCL_RANGE_PREFIX = "nccl:"


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


__all__ = ["collective_kind"]
