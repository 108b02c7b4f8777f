"""Building a finding's structured evidence from the analysis' tables: the step each interval
lies in, the part of the step a phase belongs to, and the items of matched collectives.

Every list of items is ordered strongest first (the longest time) and cut to
:data:`MAX_ITEMS`; a finding's ``steps`` are those of every item it rests on, not only the
ones kept.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from overlapscope.analysis.findings import Evidence, Finding
from overlapscope.phases import step_part

MAX_ITEMS = 5


def main_part(phases: pd.Series, weights: pd.Series) -> str | None:
    """The step part holding most of ``weights`` (None: no phase of a part)."""
    parts = phases.map(step_part)
    by = weights.groupby(parts.to_numpy()).sum() if parts.notna().any() else pd.Series()
    return str(by.idxmax()) if len(by) else None


def steps_at(steps: pd.DataFrame, rank: np.ndarray, start_us: np.ndarray) -> list[int | None]:
    """The step of each (rank, start_us): the first step of that rank that ends after it (a
    stretch before a step's first GPU op, at the step boundary, is that step's; None: after
    the rank's last step, or no steps table)."""
    out: list[int | None] = [None] * len(rank)
    if steps.empty or "end_us" not in steps:
        return out
    for r, rows in steps.sort_values("end_us").groupby("rank"):
        at = np.flatnonzero(rank == r)
        pos = np.searchsorted(rows["end_us"].to_numpy(), start_us[at], side="right")
        names = rows["step"].to_numpy()
        for i, p in zip(at.tolist(), pos.tolist(), strict=True):
            out[i] = int(names[p]) if p < len(names) else None
    return out


def _op(kind: object, unit: object) -> str:
    of = f" of {unit}" if isinstance(unit, str) else ""
    return f"{kind}{of}"


def collective_items(
    collectives: pd.DataFrame, per_rank: pd.DataFrame, value: str
) -> tuple[tuple[Evidence, ...], tuple[int, ...], tuple[int, ...]]:
    """The rows of ``per_rank`` (collective_ranks' columns) of the ``collectives`` given, as
    items of ``value`` µs each, largest first; and the steps and the ranks of every such row."""
    keys = ["group", "step", "seq"]
    if per_rank.empty or value not in per_rank or collectives.empty:
        return (), (), ()
    rows = per_rank.merge(collectives[[*keys, "kind", "unit", "start_us"]], on=keys)
    rows = rows[rows[value] > 0].sort_values(value, ascending=False, kind="stable")
    items = tuple(
        Evidence(int(r.rank), int(r.step), float(r.start_us), float(getattr(r, value)),
                 gpu_op=_op(r.kind, r.unit))
        for r in rows.head(MAX_ITEMS).itertuples(index=False)
    )  # fmt: skip
    steps = tuple(sorted({int(s) for s in rows["step"]}))
    return items, steps, tuple(sorted({int(r) for r in rows["rank"]}))


def total_items(ranks: pd.DataFrame, column: str) -> tuple[Evidence, ...]:
    """Per rank, its total of ``column`` over the counted steps (no one interval), largest
    first."""
    if column not in ranks:
        return ()
    rows = ranks[ranks[column] > 0].sort_values(column, ascending=False, kind="stable")
    return tuple(
        Evidence(int(r), None, None, float(v))
        for r, v in zip(rows["rank"].head(MAX_ITEMS), rows[column].head(MAX_ITEMS), strict=True)
    )


def placed(finding: Finding, steps: pd.DataFrame) -> Finding:
    """``finding`` with each item's ``in_step_us`` (where it has a step and a start and the
    steps table has that step)."""
    if not finding.evidence or steps.empty or "start_us" not in steps:
        return finding
    start = {
        (int(r), int(s)): float(t)
        for r, s, t in steps[["rank", "step", "start_us"]].itertuples(index=False)
    }
    items = tuple(
        dataclasses.replace(e, in_step_us=e.start_us - start[(e.rank, e.step)])
        if e.start_us is not None and e.step is not None and (e.rank, e.step) in start
        else e
        for e in finding.evidence
    )
    return dataclasses.replace(finding, evidence=items)
