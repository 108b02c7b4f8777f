"""Findings from Flight Recorder dumps alone, in the analysis' vocabulary
(:class:`~overlapscope.analysis.findings.Finding`):

* **late issuer** (``straggler``): a rank that issues the same collective of the step (same
  phase and slot, steps.py; its unit where a trace is joined) last, by more than
  :func:`lag_floor_us`, on at least :data:`MIN_SHARE` of the steps the dumps hold (and
  :data:`MIN_STEPS`). The time goes between the collective before it and it (a late issue
  says the rank spent longer there). Stake: its lag summed over those steps, per step.
* **hang** (``collective_hang``): a collective some rank of its group never issued while the
  others did: its sequence number, the last collective each rank completed (``pg_status``)
  and the stack of the stopped rank's last entry. Stake: the collective's timeout.
* **peer wait** (``peer_wait``), where timing was on: per rank, phase and slot, the wait
  inside collectives for the last rank (match.py's ``peer_wait_us``), per step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from overlapscope.analysis.findings import Finding, FindingKind, Lever
from overlapscope.phases import Phase

if TYPE_CHECKING:
    from overlapscope.flight.clocks import FlightClocks

MIN_STEPS = 3
MIN_SHARE = 0.75  # ... and on at least this share of the steps (noise is last by turns)
LAG_FLOOR_US = 500.0  # below this a lag is scheduling noise on any host
PEER_WAIT_FLOOR_US = 100.0


def lag_floor_us(coll: pd.DataFrame) -> float:
    """The lag a late issuer must exceed: LAG_FLOOR_US or 3x the median lag of the run."""
    med = float(np.nanmedian(coll["lag_us"])) if coll["lag_us"].notna().any() else 0.0
    return max(LAG_FLOOR_US, 3.0 * med)


def _where(phase: object, slot: object, unit: object) -> str:
    """``forward all-gather (unit blocks.1)``, or by its slot where the unit is unknown."""
    words = Phase(phase).words if isinstance(phase, str) else "collective"
    if isinstance(unit, str) and unit:
        return f"{words} (unit {unit})"
    if isinstance(slot, (int, np.integer)):
        n = int(slot) + 1
        return f"{words} (the {n}{_nth(n)} of its step)"
    return words


def _nth(n: int) -> str:
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def _late(coll: pd.DataFrame, entries: pd.DataFrame) -> list[Finding]:
    c = coll[coll["step"].notna() & (coll["num_ranks"] >= 2)].copy()
    if c.empty:
        return []
    floor = lag_floor_us(coll)
    steps = int(c["step"].max()) + 1
    c["unit_key"] = c["unit"].fillna("")
    occurrences = c.groupby(["phase", "slot", "unit_key"]).size()
    late = c[c["lag_us"] > floor]
    out = []
    for (rank, phase, slot, unit), g in late.groupby(["last_rank", "phase", "slot", "unit_key"]):
        n_all = int(occurrences.get((phase, slot, unit), 0))
        if len(g) < MIN_STEPS or len(g) < MIN_SHARE * n_all:
            continue
        stack = _stack_of(entries, int(rank), g)
        where = _where(phase, slot, unit or None)
        before = _before(coll, g)
        out.append(Finding(
            FindingKind.STRAGGLER, float(g["lag_us"].sum()) / max(steps, 1),
            f"rank {rank} issues the {where} late",
            f"last to issue it on {len(g)} of {n_all} steps in the dumps, by "
            f"{g['lag_us'].median():,.0f} µs (median) beyond the other ranks, whose issue "
            f"times spread {g['others_spread_us'].median():,.0f} µs: the time goes {before}; "
            f"issued from {stack}",
            (Lever(f"see what rank {rank} does before this collective (a slower host, a data "
                   "loader, a host sync, an uneven batch): profile that rank's step, or compare "
                   "its host", "it issued last on most steps"),),
            int(rank),
        ))  # fmt: skip
    return out


def _before(coll: pd.DataFrame, late: pd.DataFrame) -> str:
    """Where the lost time goes: after the collective before the late one, in the step."""
    prev = coll.set_index(["pg", "is_p2p", "seq_id"]).reindex(
        list(zip(late["pg"], late["is_p2p"], late["seq_id"] - 1, strict=True))
    )
    if prev["phase"].isna().all():
        return "before it"
    phase, slot, unit = prev[["phase", "slot", "unit"]].astype(object).mode().iloc[0]
    return f"between the {_where(phase, slot, unit)} and it"


def _stack_of(entries: pd.DataFrame, rank: int, coll: pd.DataFrame) -> str:
    mine = entries[(entries["rank"] == rank) & entries["seq_id"].isin(coll["seq_id"])]
    return str(mine["stack"].iloc[0]) if len(mine) else "(no stack recorded)"


def _hang(coll: pd.DataFrame, entries: pd.DataFrame, status: dict[int, dict[str, Any]]
          ) -> list[Finding]:  # fmt: skip
    stuck = coll[coll["never_issued_by"].notna()].sort_values("seq_id")
    out = []
    for pg, g in stuck.groupby("pg", sort=False):
        first = g.iloc[0]
        stopped = [int(r) for r in str(first["never_issued_by"]).split(",")]
        done = ", ".join(f"rank {r} {_last_completed(status.get(r, {}), pg, entries, r)}"
                         for r in sorted(status))  # fmt: skip
        last = entries[(entries["rank"] == stopped[0]) & (entries["pg"] == pg)].tail(1)
        where = (f"seq {int(last['seq_id'].iloc[0])} ({last['op'].iloc[0]}) from "
                 f"{last['stack'].iloc[0]}" if len(last) else "nothing of this group")  # fmt: skip
        issuers = entries[(entries["pg"] == pg) & (entries["seq_id"] == first["seq_id"])
                          & ~entries["is_p2p"]]  # fmt: skip
        timeout_us = float(issuers["timeout_ms"].max()) * 1e3 if len(issuers) else 0.0
        ranks = ", ".join(map(str, stopped))
        out.append(Finding(
            FindingKind.COLLECTIVE_HANG, timeout_us,
            f"collective {int(first['seq_id'])} of group {pg} ({first['op']}) was never "
            f"issued by rank {ranks}: a hang",
            f"issued by {int(first['num_ranks'])} of {int(first['num_expected'])} ranks; last "
            f"completed (pg_status): {done}; rank {stopped[0]}'s last entry: {where}",
            (Lever(f"rank {stopped[0]} stopped after its last entry: look at the code it runs "
                   "after that call (an exception, a branch only some ranks take, a collective "
                   "on another group)", "its stack above is where it last talked to the "
                   "others"),),
            stopped[0],
        ))  # fmt: skip
    return out


def _last_completed(status: dict[str, Any], pg: object, entries: pd.DataFrame, rank: int) -> int:
    for key, st in status.items():
        if str(key) == str(pg) and isinstance(st, dict) and "last_completed_collective" in st:
            return int(st["last_completed_collective"])
    done = entries[
        (entries["rank"] == rank) & (entries["pg"] == pg) & (entries["state"] == "completed")
    ]
    return int(done["seq_id"].max()) if len(done) else -1


def _peer_waits(coll: pd.DataFrame, per_rank: pd.DataFrame) -> list[Finding]:
    pr = per_rank[per_rank["peer_wait_us"].notna() & per_rank["step"].notna()]
    if pr.empty:
        return []
    steps = int(coll["step"].max()) + 1
    pr = pr.assign(unit_key=pr["unit"].fillna(""))
    tot = pr.groupby(["rank", "phase", "slot", "unit_key"])["peer_wait_us"].sum() / steps
    out = []
    for (rank, phase, slot, unit), us in tot[tot > PEER_WAIT_FLOOR_US].nlargest(5).items():
        out.append(Finding(
            FindingKind.PEER_WAIT, float(us),
            f"rank {rank} waits for its peers in the {_where(phase, slot, unit or None)}",
            f"{us:,.0f} µs per step inside the collective beyond the fastest rank's duration "
            "(Flight Recorder durations)",
            (Lever("balance what the ranks do before it, or see the late-issuer finding",
                   "the last rank to issue it holds everyone"),),
            int(rank),
        ))  # fmt: skip
    return out


def flight_findings(coll: pd.DataFrame, per_rank: pd.DataFrame, entries: pd.DataFrame,
                    status: dict[int, dict[str, Any]], clocks: FlightClocks
                    ) -> tuple[Finding, ...]:  # fmt: skip
    """Hangs first, then the rest by stake."""
    rest = sorted([*_late(coll, entries), *_peer_waits(coll, per_rank)], key=lambda f: -f.stake_us)
    return (*_hang(coll, entries, status), *rest)
