"""Forward all-gathers whose transfer runs longer than the compute meant to hide it ->
``forward_prefetch``. Stake: that exposed transfer, per step, mean over ranks."""

from __future__ import annotations

from collections.abc import Sequence

from overlapscope.analysis.findings import Finding, FindingInput, FindingKind, FindingRule, Lever
from overlapscope.analysis.findings.evidence import collective_items
from overlapscope.analysis.findings.exposure import parts_text, phase_exposure, top_text
from overlapscope.analysis.findings.framework_levers import forward_prefetch
from overlapscope.phases import Phase


def find(inp: FindingInput) -> Sequence[Finding]:
    stake, top, parts = phase_exposure(inp.units, inp.ranks, Phase.AG_FWD)
    if not inp.at_stake(stake):
        return []
    mine = inp.collectives[inp.collectives["phase"] == Phase.AG_FWD.value]
    items, steps, at = collective_items(mine, inp.table("collective_ranks"), "exposed_transfer_us")
    why = (
        f"{stake:,.0f} µs/step of the forward all-gathers' transfer, issued on time, runs "
        "longer than the compute before their use"
    )
    config = inp.manifest.engine if inp.manifest else None
    return [
        Finding(
            FindingKind.FORWARD_ALL_GATHER_EXPOSED,
            stake,
            "forward all-gathers are exposed",
            f"{stake:,.0f} µs/step of forward all-gather transfer runs longer than the "
            f"compute meant to hide it; most exposed units: {top_text(top)}{parts_text(parts)}",
            (
                Lever(
                    forward_prefetch(inp.framework, bool(config and config.forward_prefetch)), why
                ),
            ),
            ranks=at,
            steps=steps,
            evidence=items,
            phase="forward",
            cause="exposed_transfer",
        )
    ]


RULE = FindingRule(
    FindingKind.FORWARD_ALL_GATHER_EXPOSED.value,
    "exposed forward all-gathers",
    "forward all-gathers' exposed transfer (issued on time) above the threshold -> forward prefetch",
    find,
)
