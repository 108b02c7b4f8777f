"""Backward all-gathers whose transfer runs longer than the compute meant to hide it ->
prefetch them (``backward_pre``). Stake: that exposed transfer, per step, mean over ranks."""

from __future__ import annotations

from collections.abc import Sequence

from overlapscope.analysis.findings import Finding, FindingInput, FindingKind, FindingRule, Lever
from overlapscope.analysis.findings.evidence import collective_items
from overlapscope.analysis.findings.exposure import parts_text, phase_exposure, top_text
from overlapscope.phases import Phase


def _change(policy: object, engine: bool) -> str:
    if policy == "backward_pre" and engine:
        return (
            "already --policy backward_pre, which prefetches one unit ahead: use fewer, "
            "larger units so each backward hides its successor's all-gather, or a faster link"
        )
    if policy == "backward_pre":
        return (
            "already backward_pre: prefetch deeper (FSDP2 set_modules_to_backward_prefetch) "
            "or use larger units so each backward hides its successor's all-gather"
        )
    if engine:
        return (
            "prefetch the next unit's all-gather before each unit's backward: --policy backward_pre"
        )
    return (
        "prefetch the next unit's all-gather before each unit's backward: FSDP1 "
        "backward_prefetch=BackwardPrefetch.BACKWARD_PRE (FSDP2 prefetches one unit "
        "by default; set_modules_to_backward_prefetch for more)"
    )


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
            (Lever(_change(policy, inp.is_engine_run), why),),
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
