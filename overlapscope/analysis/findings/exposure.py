"""What the all-gather findings share: a phase's exposed transfer and its parts.

Prefetching and a faster link are recommended only for the exposed transfer of a collective
issued on time (waiting/comm_causes.py): the parts issued late by the host and spent waiting for the
last rank are the host finding's and the straggler's.
"""

from __future__ import annotations

import pandas as pd

from overlapscope.analysis.waiting.comm_causes import PARTS as EXPOSED_PARTS
from overlapscope.phases import Phase


def phase_exposure(
    units: pd.DataFrame, ranks: pd.DataFrame, phase: Phase
) -> tuple[float, pd.DataFrame, dict[str, float]]:
    """The stake of a prefetch or a faster link for ``phase``'s collectives: their exposed
    transfer (the part longer than the compute meant to hide it; waiting/comm_causes.py), per step,
    mean over ranks; the units most at stake; each part's share, mean over ranks."""
    rows = units[units["phase"] == phase.value]
    columns = [f"exposed_{p}_per_step_us" for p in EXPOSED_PARTS]
    per_rank = rows.groupby("rank")[columns].sum().reindex(ranks["rank"], fill_value=0.0)
    means = per_rank.mean() if len(ranks) else pd.Series(0.0, index=columns)
    parts = {p: float(means[c]) for p, c in zip(EXPOSED_PARTS, columns, strict=True)}
    top = (
        rows.groupby("unit", dropna=False)["exposed_transfer_per_step_us"]
        .mean()
        .sort_values(ascending=False)
    )
    return parts["transfer"], top.reset_index(), parts


def top_text(top: pd.DataFrame, n: int = 3) -> str:
    parts = [
        f"{u if isinstance(u, str) else '?'} {v:,.0f} µs"
        for u, v in top.head(n).itertuples(index=False)
    ]
    return ", ".join(parts)


def parts_text(parts: dict[str, float]) -> str:
    """``; also exposed: 120 µs/step issued late by the host, 40 µs/step waiting for the
    last rank`` (the parts a prefetch does not fix), or ""."""
    said = [
        f"{parts[p]:,.0f} µs/step {words}"
        for p, words in (
            ("host_late", "issued late by the host (see the host finding)"),
            ("peer_wait", "waiting for the last rank"),
        )
        if parts[p] >= 0.5
    ]
    return f"; also exposed, not fixed by prefetching: {', '.join(said)}" if said else ""
