"""Time the all-gather rate limiter held all-gathers back -> relax it where memory allows.
Stake: that time, per step, mean over ranks."""

from __future__ import annotations

from collections.abc import Sequence

from overlapscope.analysis.findings import Finding, FindingInput, FindingKind, FindingRule, Lever
from overlapscope.analysis.findings.evidence import total_items
from overlapscope.analysis.findings.framework_levers import rate_limiter


def find(inp: FindingInput) -> Sequence[Finding]:
    limiter = float(inp.ranks["limiter_per_step_us"].mean()) if len(inp.ranks) else 0.0
    if not inp.at_stake(limiter):
        return []
    peaks = inp.manifest.peak_mem_bytes if inp.manifest else ()
    mem = f"; peak memory {max(peaks) / 2**20:,.0f} MiB" if peaks else ""
    change = rate_limiter(inp.framework)
    return [
        Finding(
            FindingKind.RATE_LIMITER,
            limiter,
            "the rate limiter holds all-gathers back",
            f"{limiter:,.0f} µs/step waiting in the all-gather rate limiter{mem}",
            (Lever(change, f"all-gathers waited {limiter:,.0f} µs/step for the limiter{mem}"),),
            ranks=tuple(
                int(r) for r in inp.ranks.loc[inp.ranks["limiter_per_step_us"] > 0, "rank"]
            ),
            evidence=total_items(inp.ranks, "limiter_total_us"),
            cause="rate_limited",
        )
    ]


RULE = FindingRule(
    FindingKind.RATE_LIMITER.value,
    "rate-limiter time",
    "time waiting in the all-gather rate limiter above the threshold -> relax it",
    find,
)
