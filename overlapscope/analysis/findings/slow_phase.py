"""Why slow ranks grew late inside the step: a part of it (forward, backward, optimizer) takes
longer on them than on the other ranks, and which measure differs (analysis/host/phase_work.py):

* ``GPU op time``: the same ops run longer on their GPU (clocks, throttling, another process);
* ``median launch call``: their host takes longer to launch each op (CPU contention);
* ``idle``: their GPU waits longer between ops (their host launched them later).

A part is longer when every slow rank's time in it (phase_work's ``work_us``: its span less
the time only communication ran, where a rank waits for a late peer) exceeds every other
rank's; a measure
differs when every slow rank's exceeds every other rank's by more than :data:`DIFFERS` (and
by more than :data:`MIN_US`): beyond the spread of the ranks, not an average's accident.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from overlapscope.analysis.findings import Evidence
from overlapscope.analysis.findings.evidence import MAX_ITEMS
from overlapscope.analysis.host.phase_work import STEP
from overlapscope.phases import STEP_PARTS

# (column, words) of each measure, in the order they are named.
MEASURES = (
    ("op_us", "GPU op time"),
    ("launch_median_us", "median launch call"),
    ("idle_us", "idle"),
)
DIFFERS = 0.10
MIN_US = {"op_us": 1.0, "launch_median_us": 0.5, "idle_us": 1.0}
PARTS = STEP_PARTS


@dataclass(frozen=True, slots=True)
class SlowPart:
    """A part longer on the slow ranks: its words, the measures that differ (their words),
    and one evidence item per rank and step (the slow ranks first) with the measures."""

    part: str
    words: str
    differs: tuple[str, ...]
    items: tuple[Evidence, ...]

    def short(self) -> str:
        """The words without the measures' figures, and the measures that differ (a lever's
        why): ``their backward takes 1,370-1,460 µs against 920 µs on the other ranks; the
        median launch call and idle differ``."""
        head = self.words.split(" (GPU ops and idle", 1)[0]
        differ = " and ".join(self.differs)
        return head + (f"; the {differ} differ" if self.differs else "")


def _span(values: pd.Series, digits: int = 0) -> str:
    lo, hi = float(values.min()), float(values.max())
    f = f"{{:,.{digits}f}}"
    return f.format(lo) if f.format(lo) == f.format(hi) else f"{f.format(lo)}-{f.format(hi)}"


def _measured(r: object) -> tuple[tuple[str, float], ...]:
    """One row's measures (those it has) and its op count."""
    have = ((c, getattr(r, c)) for c, _ in MEASURES)
    return (*((c, float(v)) for c, v in have if pd.notna(v)), ("num_ops", float(r.num_ops)))  # type: ignore[attr-defined]


def _items(rows: pd.DataFrame, slow: tuple[int, ...]) -> tuple[Evidence, ...]:
    """One item per rank and step of the part, the slow ranks first, longest first."""
    first = rows.assign(other=~rows["rank"].isin(slow)).sort_values(
        ["other", "work_us"], ascending=[True, False], kind="stable"
    )
    return tuple(
        Evidence(
            int(r.rank), int(r.step), float(r.start_us), float(r.work_us), measures=_measured(r)
        )
        for r in first.head(MAX_ITEMS).itertuples(index=False)
    )


def _measures(per: pd.DataFrame, slow: tuple[int, ...]) -> tuple[list[tuple[str, str]], list[str]]:
    """The measures that differ (their words, and what each says), and the words of those
    that do not."""
    mine, rest = per.loc[list(slow)], per.drop(index=list(slow))
    differ, same = [], []
    for column, words in MEASURES:
        a, b = mine[column].dropna(), rest[column].dropna()
        if a.empty or b.empty:
            continue
        digits = 1 if column == "launch_median_us" else 0
        said = f"{words} {_span(a, digits)} against {_span(b, digits)} µs"
        top = float(b.max())
        beyond = float(a.min()) > top * (1 + DIFFERS) and float(a.min()) - top > MIN_US[column]
        if beyond:
            differ.append((words, said))
        else:
            same.append(said)
    return differ, same


def slow_part(table: pd.DataFrame, part: str, slow: tuple[int, ...]) -> SlowPart | None:
    """``part`` compared between the ``slow`` ranks and the others (None: it is not longer on
    every slow rank, or a side has no compute op in it)."""
    if table.empty or "part" not in table:
        return None
    rows = table[table["part"] == part]
    per = rows.groupby("rank")[["work_us", "num_ops", *(c for c, _ in MEASURES)]].mean()
    if not set(slow) <= set(per.index) or len(per) <= len(slow):
        return None
    mine, rest = per.loc[list(slow)], per.drop(index=list(slow))
    if (mine["num_ops"] <= 0).any() or (rest["num_ops"] <= 0).all():
        return None
    if not float(mine["work_us"].min()) > float(rest["work_us"].max()):
        return None
    ops = per["num_ops"]
    same_ops = (
        f"with the same {ops.iloc[0]:,.0f} GPU ops"
        if ops.nunique() == 1
        else f"with {_span(mine['num_ops'])} against {_span(rest['num_ops'])} GPU ops"
    )
    differ, same = _measures(per, slow)
    their = "their" if len(slow) > 1 else "its"
    what = "step's GPU work (the trace names no phases)" if part == STEP else part
    words = (
        f"{their} {what} takes {_span(mine['work_us'])} µs against {_span(rest['work_us'])} µs on "
        f"the other ranks (GPU ops and idle; time only in collectives left out), {same_ops}"
        + (f"; what differs: {', '.join(d for _, d in differ)}" if differ else "")
        + ("; no one measure differs" if not differ else "")
        + (f" ({', '.join(same)}: alike)" if same else "")
    )
    return SlowPart(part, words, tuple(w for w, _ in differ), _items(rows, slow))


def slow_parts(table: pd.DataFrame, first: str | None, slow: tuple[int, ...]) -> list[SlowPart]:
    """Every part longer on the ``slow`` ranks, the finding's own part (``first``) first;
    where the collectives name no part (a trace without phases: DDP, plain collectives), the
    step's GPU work of no named part (phase_work's ``step``)."""
    order = [first, *(p for p in PARTS if p != first)] if first in PARTS else list(PARTS)
    order += [STEP] if first is None else []
    found = (slow_part(table, p, slow) for p in order)
    return [s for s in found if s is not None]
