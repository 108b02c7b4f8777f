"""Backward all-gathers whose transfer runs longer than the compute meant to hide it ->
prefetch them (``backward_pre``). Stake: that exposed transfer, per step, mean over ranks."""

from __future__ import annotations

from collections.abc import Sequence

from overlapscope.analysis.findings import Finding, FindingInput, FindingKind, FindingRule, Lever
from overlapscope.analysis.findings.evidence import collective_items
from overlapscope.analysis.findings.exposure import parts_text, phase_exposure, top_text
from overlapscope.analysis.findings.framework_levers import backward_prefetch
from overlapscope.phases import Phase


def find(inp: FindingInput) -> Sequence[Finding]:
    stake, top, parts = phase_exposure(inp.units, inp.ranks, Phase.AG_BWD)
    if not inp.at_stake(stake):
        return []
    mine = inp.collectives[inp.collectives["phase"] == Phase.AG_BWD.value]
    items, steps, at = collective_items(mine, inp.table("collective_ranks"), "exposed_transfer_us")
    why = (
        f"{stake:,.0f} µs/step of the backward all-gathers' transfer, issued on time, runs "
        "longer than the compute before their use"
    )
    config = inp.manifest.engine if inp.manifest else None
    policy = config.policy.value if config else None
    return [
        Finding(
            FindingKind.BACKWARD_ALL_GATHER_EXPOSED,
            stake,
            "backward all-gathers are exposed",
            f"{stake:,.0f} µs/step of backward all-gather transfer runs longer than the "
            f"compute meant to hide it; most exposed units: {top_text(top)}{parts_text(parts)}",
            (Lever(backward_prefetch(inp.framework, policy), why),),
            ranks=at,
            steps=steps,
            evidence=items,
            phase="backward",
            cause="exposed_transfer",
        )
    ]


RULE = FindingRule(
    FindingKind.BACKWARD_ALL_GATHER_EXPOSED.value,
    "exposed backward all-gathers",
    "backward all-gathers' exposed transfer (issued on time) above the threshold -> prefetch",
    find,
)
