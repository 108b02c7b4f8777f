"""The range-naming contract between the engine (which emits) and the analysis (which parses).

Every phase of every unit is one profiler range (and, on CUDA, one NVTX range) named::

    ovs/<phase>/<unit>

``<phase>`` is a value of the phase table (:class:`overlapscope.phases.Phase`), ``<unit>``
the unit's name (a module path such as ``blocks.3``; ``root`` for the parameters outside every
unit; ``all`` for the optimizer step). Unit names never contain ``/``.

What a range covers follows from its phase's lane in the table:

* ``issue`` (``ag_fwd``, ``rs``, ...): issuing that collective of the unit (CPU thread);
* ``memory`` (``h2d``, ``d2h``): the shard copy to / from the device (CPU offload; on CPU
  runs the copy itself, on CUDA its issue on the copy stream);
* ``wait`` (``<comm>.wait``): the training thread blocked until that collective or copy is
  done; ``limiter``: the rate limiter holding back an all-gather of the unit;
* ``compute`` (``fwd``, ``bwd``, ``recompute``, ``optim``): the unit's own compute, its
  children excluded (``optim``: the optimizer step on the shards, unit ``all``).

The issue ranges mark the *issue* on the training thread. The transfer itself is the
backend's own event: on CUDA the NCCL kernel launched inside the range (linked by its
correlation id). On CPU the engine builds all-gather and reduce-scatter from gloo sends and
receives (``overlapscope/engine/p2p.py``); gloo records each as a ``gloo:send`` /
``gloo:recv`` event on the training thread that starts inside the issue range and ends when
the transfer completed; the analysis folds them into one transfer per range
(``overlapscope/trace/recognize/p2p.py``). ``no_shard``'s all-reduce is a ``gloo:all_reduce`` op on
the
comm group's single gloo thread, which runs them in issue order (the k-th op belongs to the
k-th ``ar`` range). Traces of earlier engine versions carry ``gloo:all_gather`` /
``gloo:all_reduce`` ops on that thread for every collective, and still read the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from overlapscope.phases import Phase

PREFIX = "ovs"
OPTIM_UNIT = "all"
ROOT_UNIT = "root"

_RANGE_RE = re.compile(r"^ovs/(?P<phase>[a-z0-9_.]+)/(?P<unit>[^/]+)$")


@dataclass(frozen=True, slots=True)
class RangeName:
    phase: Phase
    unit: str

    def __str__(self) -> str:
        return format_range(self.phase, self.unit)


def format_range(phase: Phase, unit: str) -> str:
    if not unit or "/" in unit:
        raise ValueError(f"unit name {unit!r} must be non-empty and contain no '/'")
    return f"{PREFIX}/{phase.value}/{unit}"


def parse_range(name: str) -> RangeName | None:
    """Parse ``ovs/<phase>/<unit>``; None for any other name (or an unknown phase)."""
    m = _RANGE_RE.match(name)
    if m is None:
        return None
    try:
        phase = Phase(m.group("phase"))
    except ValueError:
        return None
    return RangeName(phase, m.group("unit"))
