"""A finding as a user adds one: this module (its rule, cause word and lever) and one
``register(RULE)`` call (test_finding_registry.py registers it for its tests only)."""

from __future__ import annotations

from collections.abc import Sequence

from overlapscope.analysis.findings import Finding, FindingInput, FindingRule, Lever

KIND = "user_every_rank_steps"


def find(inp: FindingInput) -> Sequence[Finding]:
    """Every run with a step time: the whole mean step at stake, one lever."""
    if not inp.at_stake(inp.step_us):
        return []
    return [
        Finding(
            KIND,
            inp.step_us,
            "a user's finding",
            f"{len(inp.ranks)} ranks counted {inp.num_steps:g} steps each",
            (Lever("do what the user's rule says", "the user's rule fired"),),
            cause="user_cause",
        )
    ]


RULE = FindingRule(
    KIND,
    "the user's pattern",
    "every run with a step time (a test of the registry)",
    find,
    causes={"user_cause": "the user's cause"},
)
