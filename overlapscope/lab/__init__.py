"""The slow-network lab: ranks in their own network namespaces, joined by a shaped link.

Public API::

    check_lab_available()                      # UserError (one line + fix) if not usable
    with shaped_network(num_ranks, link_gbit) as lab:   # link_gbit=None: unshaped veth
        codes = lab.run_ranks(argv_for_rank, env, log_dir, timeout_s)
        lab.slots[k] -> RankSlot(rank, netns, ifname, addr); lab.master_addr

See ``docs/LAB.md`` for the topology, the shaping parameters and measured bandwidths.
Vocabulary: ``rank``, ``num_ranks``, ``link_gbit`` (decimal Gbit/s, 1e9 bit/s), ``*_bytes``.
"""

from overlapscope.lab.netns import LabError, check_lab_available, remove_stale_namespaces
from overlapscope.lab.network import Lab, RankSlot, TbfShape, shaped_network

__all__ = [
    "Lab",
    "LabError",
    "RankSlot",
    "TbfShape",
    "check_lab_available",
    "remove_stale_namespaces",
    "shaped_network",
]
