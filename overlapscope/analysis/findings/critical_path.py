"""The compute work longest on the critical path (analysis/critical_path/path.py), in at least half
of the steps -> speed it up. Stake: what a 10% faster piece of work wins back at most, 10% of
its time on the path per step."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from overlapscope.analysis.critical_path.path import SHORTEN
from overlapscope.analysis.critical_path.report import link_name, path_groups
from overlapscope.analysis.findings import (
    Evidence,
    Finding,
    FindingInput,
    FindingKind,
    FindingRule,
    Lever,
)
from overlapscope.analysis.findings.evidence import MAX_ITEMS
from overlapscope.phases import step_part

# A path finding needs its work on the path in at least this share of the steps.
MIN_STEP_SHARE = 0.5


def find(inp: FindingInput) -> Sequence[Finding]:
    path = inp.path
    if path is None or path.steps.empty:
        return []
    groups = path_groups(path)
    compute = groups[groups["kind"] == "compute"]
    num = len(path.steps)
    compute = compute[compute["num_steps"] >= MIN_STEP_SHARE * num]
    if compute.empty:
        return []
    top = compute.iloc[0]
    stake = SHORTEN * float(top["dur_us_per_step"])
    if not inp.at_stake(stake):
        return []
    rank = int(top["rank"])
    name = link_name(rank, "compute", top["unit"], top["phase"])
    saving = top["saving_us"]
    replayed = (
        f"; its longest link 10% shorter saves {float(saving):,.0f} µs (replayed)"
        if pd.notna(saving)
        else ""
    )
    links = path.links.astype({"unit": object, "phase": object})
    same = (links["rank"] == rank) & (links["kind"] == "compute")
    for col in ("unit", "phase"):
        same &= links[col].isna() if pd.isna(top[col]) else links[col] == top[col]
    mine = links[same].sort_values("dur_us", ascending=False, kind="stable")
    items = tuple(
        Evidence(rank, int(r.step), float(r.start_us), float(r.dur_us), gpu_op=name)
        for r in mine.head(MAX_ITEMS).itertuples(index=False)
    )
    return [
        Finding(
            FindingKind.CRITICAL_PATH,
            stake,
            f"{name} is on the critical path in {int(top['num_steps'])} of {num} steps",
            f"{float(top['dur_us_per_step']):,.0f} µs/step of the step's critical path "
            f"(mean step {inp.step_us:,.0f} µs){replayed}",
            (
                Lever(
                    f"speed up {name} (or move work off rank {rank})",
                    "every µs it loses is a µs of the step, while work off the path is not",
                ),
            ),
            rank=rank,
            steps=tuple(sorted({int(s) for s in mine["step"]})),
            phase=step_part(top["phase"]),
            evidence=items,
            cause="critical_path",
        )
    ]


RULE = FindingRule(
    FindingKind.CRITICAL_PATH.value,
    "compute on the critical path",
    "the compute longest on the critical path, in at least half of the steps -> speed it up",
    find,
)
