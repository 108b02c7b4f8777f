"""A GPU starved by its host.

Its stake, per step and mean over ranks, is the time the GPU lost to its host: idle gaps
that the host caused (``host_bound``: the next op was launched after the GPU ran dry;
``sync``: the host had blocked in a sync; idle.py) and communication it issued late
(``host_late``; comm_causes.py). It is ranked with the other findings by that stake.

Evidence: its share of the step (and the worst rank's), the CPU ops the launching thread
was in during those gaps (on the critical path where it runs through the host, else over
every such gap), the GPU ops per step and how fast they were launched, and what the
thread was doing (sync, data loading, optimizer, hooks, other work). Levers, the ones the
evidence points at first: no host syncs in the step; more data-loader workers and pinned
memory; CUDA graphs / ``torch.compile(mode="reduce-overhead")``; fewer and larger units or
fused kernels (a fused optimizer).
"""

from __future__ import annotations

import pandas as pd

from overlapscope.analysis.findings import Finding, FindingInput, FindingKind, FindingRule
from overlapscope.analysis.host import Activity

HOST_CAUSES = ("host_bound", "sync")
# What each activity points at, in the order a tie is broken.
LEVERS = {
    Activity.SYNC.value: (
        "no host syncs in the step (.item(), cudaStreamSynchronize, synchronous copies: keep "
        "values on the GPU, log every N steps, copy with non_blocking=True)"
    ),
    Activity.DATA.value: (
        "more data-loader workers and pinned memory (DataLoader(num_workers=..., "
        "pin_memory=True), prefetch_factor)"
    ),
    Activity.OPTIMIZER.value: "a fused optimizer step (fused=True or foreach=True)",
    Activity.OTHER.value: (
        'CUDA graphs / torch.compile(mode="reduce-overhead") to launch the step\'s kernels '
        "without Python in between"
    ),
    Activity.HOOKS.value: "fewer and larger units (FSDP wrapping) or fused kernels",
    Activity.COLLECTIVE.value: "no CPU collectives in the step (barriers, *_object calls)",
}


def _per_step(ranks: pd.DataFrame) -> pd.Series:
    """Per rank: µs per step the host cost the GPU."""
    parts = [f"idle_{c}_per_step_us" for c in HOST_CAUSES] + ["exposed_comm_host_late_per_step_us"]
    return ranks.set_index("rank")[parts].fillna(0.0).sum(axis=1)


def _host_ops(ops: pd.DataFrame, links: pd.DataFrame | None, n: int = 3) -> tuple[str, str]:
    """The CPU ops the launching threads were in during host-caused gaps, most time first
    (from the critical path's host links when it has any: ``"on the critical path"``;
    ``ops``: idle.host_ops)."""
    source, where = ops.rename(columns={"dur_total_us": "dur_us"}), "during those gaps"
    source = source[source["cause"].isin(HOST_CAUSES)]
    if links is not None and "host_op" in links and (links["kind"] == "host").any():
        source, where = links[links["kind"] == "host"], "on the critical path"
    named = source[source["host_op"].notna() & (source["host_op"] != "-")]
    if named.empty:
        return "", where
    top = named.groupby("host_op")["dur_us"].sum().sort_values(ascending=False).head(n)
    total = float(source["dur_us"].sum())
    return ", ".join(f"{op} ({v / total:.0%})" for op, v in top.items()), where


def _activities(ops: pd.DataFrame) -> pd.Series:
    """Share of the host-caused gap time by what the launching thread was doing; a gap
    caused by a sync is the sync's, whatever the thread ran after it returned (a .item()
    per block on an H100, traces/gpu-torch-fsdp2-item-per-block: the thread is back in
    Python hooks for most of each such gap)."""
    host = ops[ops["cause"].isin(HOST_CAUSES)]
    if host.empty:
        return pd.Series(dtype=float)
    doing = host["host_activity"].where(host["cause"] != "sync", Activity.SYNC.value)
    by = host["dur_total_us"].groupby(doing.to_numpy()).sum()
    return (by / by.sum()).sort_values(ascending=False)


# An activity's lever is given when it holds at least this share of the host-caused time;
# the general ones (CUDA graphs, fewer and larger units) always.
LEVER_SHARE = 0.05
GENERAL = (Activity.OTHER.value, Activity.HOOKS.value)


def _levers(shares: pd.Series) -> str:
    """The levers of what the thread was doing, most first, then the general ones."""
    order = [a for a in shares.index if a in LEVERS and shares[a] >= LEVER_SHARE]
    order += [a for a in GENERAL if a not in order]
    return "; ".join(LEVERS[a] for a in order)


def find(inp: FindingInput) -> list[Finding]:
    """The host-starved finding when its stake passes the threshold (the critical path's
    host links name the ops where it has any)."""
    ranks, steps, ops = inp.ranks, inp.steps, inp.host_ops
    links = inp.path.links if inp.path is not None else None
    if ranks.empty or "idle_host_bound_per_step_us" not in ranks:
        return []
    per_rank = _per_step(ranks)
    stake = float(per_rank.mean())
    step_us = inp.step_us
    if not inp.at_stake(stake):
        return []
    worst = int(per_rank.idxmax())
    worst_step = float(ranks.set_index("rank").loc[worst, "step_time_per_step_us"])
    named, where = _host_ops(ops, links)
    shares = _activities(ops)
    doing = ", ".join(f"{a} {v:.0%}" for a, v in shares.head(4).items() if v >= 0.005)
    num_ops = float(steps["num_gpu_ops"].mean()) if "num_gpu_ops" in steps else 0.0
    rate = (
        f"; {num_ops:,.0f} GPU ops per step, one launched every "
        f"{step_us / num_ops:,.1f} µs of the step on average"
        if num_ops > 0
        else ""
    )
    evidence = (
        f"{stake:,.0f} µs/step ({stake / step_us:.0%} of the step) of GPU idle or late-issued "
        f"communication waits on the host, rank {worst} worst at {per_rank[worst]:,.0f} µs/step "
        f"({per_rank[worst] / worst_step:.0%})"
        + (f"; the launching thread was in {named} {where}" if named else "")
        + (f" (doing: {doing})" if doing else "")
        + rate
    )
    return [
        Finding(
            FindingKind.HOST_STARVED,
            stake,
            "the GPU is starved by its host",
            evidence,
            _levers(shares),
            rank=None,
            ranks=(worst,),
            cause="host_bound",
        )
    ]


RULE = FindingRule(
    FindingKind.HOST_STARVED.value,
    "GPU idle caused by the host",
    "GPU idle the host caused (host_bound, sync) plus communication it issued late above the "
    "threshold -> the levers of what the launching thread was doing",
    find,
)
