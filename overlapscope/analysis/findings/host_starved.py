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

from overlapscope.analysis.findings import (
    MIN_STAKE_FRACTION,
    Evidence,
    Finding,
    FindingInput,
    FindingKind,
    FindingRule,
    Lever,
)
from overlapscope.analysis.findings.evidence import MAX_ITEMS, steps_at
from overlapscope.analysis.findings.framework_levers import hooks, more_work_per_launch
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
    Activity.COLLECTIVE.value: "no CPU collectives in the step (barriers, *_object calls)",
}


def _per_step(ranks: pd.DataFrame) -> pd.Series:
    """Per rank: µs per step the host cost the GPU."""
    parts = [f"idle_{c}_per_step_us" for c in HOST_CAUSES] + ["exposed_comm_host_late_per_step_us"]
    return ranks.set_index("rank")[parts].fillna(0.0).sum(axis=1)


def _host_ops(
    ops: pd.DataFrame, links: pd.DataFrame | None, n: int = 3
) -> tuple[str, str, pd.Series]:
    """The CPU ops the launching threads were in during host-caused gaps, most time first,
    the words of that population, and what the threads were doing over the same time (one
    population per sentence: from the critical path's host links when it has any, ``"on
    the critical path"``; else over the gaps, ``ops``: idle.host_ops)."""
    source, where = ops.rename(columns={"dur_total_us": "dur_us"}), "during those gaps"
    source = source[source["cause"].isin(HOST_CAUSES)]
    if links is not None and "host_op" in links and (links["kind"] == "host").any():
        source, where = links[links["kind"] == "host"], "on the critical path"
    doing = pd.Series(dtype=float)
    if len(source) and "host_activity" in source:
        what = source["host_activity"].where(source["cause"] != "sync", Activity.SYNC.value)
        by = source["dur_us"].groupby(what.fillna("-").to_numpy()).sum().drop("-", errors="ignore")
        doing = (by / max(float(source["dur_us"].sum()), 1e-9)).sort_values(ascending=False)
    named = source[source["host_op"].notna() & (source["host_op"] != "-")]
    if named.empty:
        return "", where, doing
    top = named.groupby("host_op")["dur_us"].sum().sort_values(ascending=False).head(n)
    total = float(source["dur_us"].sum())
    return ", ".join(f"{op} ({v / total:.0%})" for op, v in top.items()), where, doing


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


# GPU compute below this share of the step makes more work per launch the first lever.
LOW_BUSY_SHARE = 0.25


def _per_launch(inp: FindingInput, shares: pd.Series, stake_us: float) -> list[Lever]:
    """More work per launch, first, where GPU compute is a small share of the step (not
    where data loading, syncs or the optimizer hold most of the host's time: their own
    levers come first, and a larger batch loads longer too)."""
    if "compute_per_step_us" not in inp.ranks or "num_gpu_ops" not in inp.steps:
        return []
    compute, step = float(inp.ranks["compute_per_step_us"].mean()), inp.step_us
    specific = (Activity.DATA.value, Activity.SYNC.value, Activity.OPTIMIZER.value)
    held = bool(len(shares)) and shares.index[0] in specific and shares.iloc[0] >= 0.5
    if not compute < LOW_BUSY_SHARE * step or held:
        return []
    num_ops = float(inp.steps["num_gpu_ops"].mean())
    why = (
        f"GPU compute is {compute:,.0f} µs of a {step:,.0f} µs step ({compute / step:.0%}), "
        f"in {num_ops:,.0f} GPU ops ({compute / max(num_ops, 1.0):,.1f} µs each on average)"
    )
    return [Lever(more_work_per_launch(), why, stake_us)]


def _levers(inp: FindingInput, shares: pd.Series, stake_us: float) -> tuple[Lever, ...]:
    """More work per launch where the GPU is mostly idle; then the levers of what the thread
    was doing, most first, each with the host-caused time it addresses; then the general
    ones (for all of it)."""
    words = {**LEVERS, Activity.HOOKS.value: hooks(inp.framework)}
    order = [a for a in shares.index if a in words and shares[a] >= LEVER_SHARE]
    out = _per_launch(inp, shares, stake_us)
    out += [
        Lever(
            words[a],
            f"the thread was in {a} for {shares[a]:.0%} of the host-caused GPU idle",
            shares[a] * stake_us,
        )
        for a in order
    ]
    out += [
        Lever(words[a], "launches the step's GPU work with less host time in between", stake_us)
        for a in GENERAL
        if a not in order
    ]
    return tuple(out)


def _items(inp: FindingInput) -> tuple[tuple[Evidence, ...], tuple[int, ...]]:
    """The host-caused stretches without GPU work (host_path.py), longest first, each with
    the CPU op the launching thread was in and the GPU op that ended it; and their steps."""
    gaps = inp.table("host_gaps")
    if gaps.empty or "cause" not in gaps:
        return (), ()
    gaps = gaps[gaps["cause"].isin(HOST_CAUSES)].assign(dur_us=gaps["end_us"] - gaps["start_us"])
    steps = steps_at(inp.steps, gaps["rank"].to_numpy(), gaps["start_us"].to_numpy())
    gaps = gaps.assign(step=pd.Series(steps, index=gaps.index, dtype=object))
    gaps = gaps.sort_values("dur_us", ascending=False, kind="stable")
    items = tuple(
        Evidence(
            int(g.rank),
            g.step,
            float(g.start_us),
            float(g.dur_us),
            tuple(op for op in (g.host_op,) if isinstance(op, str) and op != "-"),
            g.late_op if isinstance(g.late_op, str) else None,
        )
        for g in gaps.head(MAX_ITEMS).itertuples(index=False)
    )
    return items, tuple(sorted({int(s) for s in steps if s is not None}))


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
    own = ranks.set_index("rank")["step_time_per_step_us"].reindex(per_rank.index)
    worst_step = float(own.loc[worst])
    items, at_steps = _items(inp)
    named, where, seen = _host_ops(ops, links)
    shares = _activities(ops)
    doing = ", ".join(f"{a} {v:.0%}" for a, v in seen.head(4).items() if v >= 0.005)
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
            _levers(inp, shares, stake),
            ranks=tuple(int(r) for r in per_rank.index[per_rank > MIN_STAKE_FRACTION * own]),
            steps=at_steps,
            evidence=items,
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
