"""Bus bandwidth far below the link (when the link speed is known) -> the network. Stake:
the exposed transfer of the collectives of at least 1 MiB, scaled by the share of the link
they did not use."""

from __future__ import annotations

from collections.abc import Sequence

from overlapscope.analysis.findings import Finding, FindingInput, FindingKind, FindingRule, Lever
from overlapscope.analysis.findings.evidence import collective_items

# Bus bandwidth below this share of the link speed points at the network.
LINK_SHARE = 0.5
# Only collectives at least this large say anything about bandwidth.
MIN_BANDWIDTH_BYTES = 1 << 20


def find(inp: FindingInput) -> Sequence[Finding]:
    link = inp.manifest.link_gbit if inp.manifest else None
    if link is None or inp.ranks.empty:
        return []
    coll = inp.collectives
    big = coll[(coll["bytes"] >= MIN_BANDWIDTH_BYTES) & coll["busbw_gbps"].notna()]
    if big.empty:
        return []
    busbw_gbit = float(big["busbw_gbps"].median()) * 8.0
    if busbw_gbit >= LINK_SHARE * link:
        return []
    exposed = float(big["exposed_transfer_us"].sum()) / inp.num_steps
    items, steps, at = collective_items(big, inp.table("collective_ranks"), "exposed_transfer_us")
    # a faster link wins back only exposed transfer (waiting/comm_causes.py), at most this share
    stake = exposed * (1.0 - busbw_gbit / link)
    if not inp.at_stake(stake):
        return []
    return [
        Finding(
            FindingKind.NETWORK,
            stake,
            "bus bandwidth far below the link",
            f"median bus bandwidth {busbw_gbit:.2f} Gbit/s over {len(big)} collectives of "
            f">= 1 MiB, link {link:g} Gbit/s ({busbw_gbit / link:.0%}); their exposed "
            f"transfer {exposed:,.0f} µs/step",
            (
                Lever(
                    "check the network: interface and route used by the backend "
                    "(GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME), link speed, competing traffic",
                    f"collectives of >= 1 MiB move {busbw_gbit:.2f} of {link:g} Gbit/s",
                ),
                Lever(
                    "larger units amortise latency",
                    f"{len(big)} collectives of >= 1 MiB, {exposed:,.0f} µs/step exposed",
                ),
            ),
            ranks=at,
            steps=steps,
            evidence=items,
            cause="slow_link",
        )
    ]


RULE = FindingRule(
    FindingKind.NETWORK.value,
    "a slow link",
    "median bus bandwidth of collectives of >= 1 MiB below half of config.link_gbit -> the network",
    find,
)
