"""Blocking host syncs (analysis/host/syncs.py: stream and device syncs, synchronous and pageable
copies, ``.item()``, ``.tolist()``, ``nonzero``) -> the op and its fix. Stake: what they cost
the GPU, per step, mean over ranks: the blocked time it did not compute and the launch latency
of the drained queue after. Where a collective was in flight during them, a peer's lateness
reached the GPU through the sync, and the summary says how much (the peer wait beside it).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from overlapscope.analysis.findings import (
    Evidence,
    Finding,
    FindingInput,
    FindingKind,
    FindingRule,
    Lever,
)
from overlapscope.analysis.findings.evidence import MAX_ITEMS
from overlapscope.analysis.registry import SYNCS

# The fix of each kind of sync ({op}: the innermost torch op around it).
FIXES = {
    "pageable copy": (
        "pin the host memory and copy with non_blocking=True ({op}: tensor.pin_memory(), "
        "DataLoader(pin_memory=True)), or keep the tensor on the GPU"
    ),
    "synchronous copy": "copy into pinned memory with non_blocking=True ({op}), or every N steps",
    "item": "keep the value on the GPU ({op}: .item() waits for the GPU); read it every N steps",
    "tolist": "keep the values on the GPU ({op}: .tolist() waits for the GPU), or every N steps",
    "nonzero": (
        "avoid a shape the host must read in the step ({op}: nonzero, masked_select, "
        "boolean indexing), or compute it once outside the loop"
    ),
    "stream sync": "drop the explicit sync from the step ({op}: torch.cuda.synchronize(), "
    "event.synchronize()), or sync every N steps",
}


def _phase(chain: str) -> str | None:
    if "Optimizer." in chain or "optim" in chain.lower():
        return "optimizer"
    if "Backward" in chain or "autograd::engine" in chain or "backward" in chain:
        return "backward"
    return "forward" if "forward" in chain else None


def _items(syncs: pd.DataFrame) -> tuple[Evidence, ...]:
    top = syncs.sort_values("stalled_us", ascending=False, kind="stable").head(MAX_ITEMS)
    return tuple(
        Evidence(
            int(r.rank),
            int(r.step) if pd.notna(r.step) and int(r.step) >= 0 else None,
            float(r.start_us),
            float(r.dur_us),
            (*(op for op in str(r.cpu_ops).split(" > ") if op), str(r.call)),
            r.gpu_op if isinstance(r.gpu_op, str) else None,
        )
        for r in top.itertuples(index=False)
    )


def _levers(syncs: pd.DataFrame, steps: float, num_ranks: int) -> tuple[Lever, ...]:
    """A lever per kind, most stalled first, naming the innermost op of its longest call."""
    out = []
    by = syncs.groupby("kind")["stalled_us"].sum().sort_values(ascending=False)
    for kind, stalled in by.items():
        mine = syncs[syncs["kind"] == kind].sort_values("stalled_us", ascending=False)
        chain = str(mine["cpu_ops"].iloc[0]).split(" > ")
        op = chain[-1] if chain and chain[-1] else str(mine["call"].iloc[0])
        why = (
            f"{len(mine)} {kind} calls, blocked {float(mine['dur_us'].sum()) / steps / num_ranks:,.0f}"
            f" µs/step, in {' > '.join(c for c in chain if c) or mine['call'].iloc[0]}"
        )
        text = FIXES.get(str(kind), "remove the sync from the step ({op})").format(op=op)
        out.append(Lever(text, why, float(stalled) / steps / num_ranks))
    return tuple(out)


def _late_peers(syncs: pd.DataFrame, collectives: pd.DataFrame) -> str:
    """``rank 7`` / ``ranks 4, 5``: the last ranks to arrive at the collectives in flight
    during the syncs ("" where none is known)."""
    keys = ["group", "step", "seq"]
    if not set(keys) <= set(collectives) or "straggler_rank" not in collectives:
        return ""
    hit = syncs[syncs["comm_in_flight_us"] > 0][keys].merge(collectives, on=keys)
    ranks = sorted({int(r) for r in hit["straggler_rank"].dropna()})
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}" if ranks else ""


def find(inp: FindingInput) -> Sequence[Finding]:
    syncs = inp.table(SYNCS)
    if syncs.empty or inp.ranks.empty:
        return []
    steps, num_ranks = inp.num_steps, len(inp.ranks)
    stake = float(syncs["stalled_us"].sum()) / steps / num_ranks
    if not inp.at_stake(stake):
        return []
    blocked = float(syncs["dur_us"].sum()) / steps / num_ranks
    peer = float(syncs["comm_in_flight_us"].sum()) / steps / num_ranks
    late = _late_peers(syncs, inp.collectives)
    waited = f" ({late} last to arrive)" if late else ""
    beside = (
        f"; a collective was in flight for {peer:,.0f} µs/step of it: a late peer{waited} made "
        "the GPU work late and the sync turned that into a drained queue (the peer wait is "
        "the straggler's)"
        if peer >= 0.5
        else ""
    )
    per_rank = syncs.groupby("rank")["stalled_us"].sum()
    chains = syncs.groupby("cpu_ops")["stalled_us"].sum()
    return [
        Finding(
            FindingKind.HOST_SYNC,
            stake,
            "host syncs stall the GPU",
            f"{len(syncs)} blocking calls hold the host {blocked:,.0f} µs/step; they cost the GPU "
            f"{stake:,.0f} µs/step (blocked time with nothing else on the GPU, and the drained "
            f"queue after){beside}",
            _levers(syncs, steps, num_ranks),
            ranks=tuple(int(r) for r in per_rank.index[per_rank > 0]),
            steps=tuple(sorted({int(s) for s in syncs["step"] if pd.notna(s) and int(s) >= 0})),
            phase=_phase(str(chains.idxmax())) if len(chains) else None,
            cause="sync",
            evidence=_items(syncs),
        )
    ]


RULE = FindingRule(
    FindingKind.HOST_SYNC.value,
    "blocking host syncs",
    "the GPU time that blocking host calls (syncs, synchronous or pageable copies, .item(), "
    ".tolist(), nonzero) cost, above the threshold -> the op and its fix",
    find,
)
