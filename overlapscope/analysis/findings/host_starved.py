"""A GPU starved by its host.

Its stake, per step and mean over ranks, is the time the GPU lost to its host: idle gaps
that the host caused (``host_bound``: the next op was launched after the GPU ran dry;
``sync``: the host had blocked in a sync; waiting/idle.py) and communication it issued late
(``host_late``; waiting/comm_causes.py). It is ranked with the other findings by that stake.

Evidence: its share of the step (and the worst rank's); over the idle part of it (the same
gaps: one population per sentence), what the launching thread was doing (sync, data
loading, optimizer, hooks, other work) and, within each, the CPU ranges it was in, each
stretch named by the innermost range covering most of it (a DataLoader's ``__next__``, a
module's forward, ``Optimizer.step``, ``AccumulateGrad``, an FSDP hook, a user annotation;
an op inside only where it covers most of the stretch; host/calls.py); the GPU ops per step and
how fast they were launched. Levers, the ones the
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
from overlapscope.analysis.host.calls import Activity

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


# Ranges shown per activity in the breakdown, and the least share one is shown with.
RANGES_SHOWN = 3
MIN_SHOWN_SHARE = 0.005
_NO_RANGE = "-"  # (idle.host_ops: no one CPU range covers most of the stretch)


def _gap_time(ops: pd.DataFrame) -> pd.DataFrame:
    """The host-caused idle gaps' time (idle.host_ops) by what the launching thread was
    doing (``activity``; a gap caused by a sync is the sync's, whatever the thread ran after
    it returned: a .item() per block on an H100, traces/gpu-torch-fsdp2-item-per-block, is
    back in Python hooks for most of each such gap) and the innermost CPU range covering
    most of the stretch (``range``), as ``share`` of that time, most first."""
    host = ops[ops["cause"].isin(HOST_CAUSES)]
    if host.empty:
        return pd.DataFrame(columns=["activity", "range", "share"])
    doing = host["host_activity"].where(host["cause"] != "sync", Activity.SYNC.value)
    by = pd.DataFrame(
        {
            "activity": doing.fillna(Activity.OTHER.value).to_numpy(),
            "range": host["host_op"].fillna(_NO_RANGE).to_numpy(),
            "us": host["dur_total_us"].to_numpy(),
        }
    )
    out = by.groupby(["activity", "range"], as_index=False)["us"].sum()
    out["share"] = out["us"] / max(float(out["us"].sum()), 1e-9)
    return out.sort_values("share", ascending=False, kind="stable").drop(columns="us")


def _activities(ops: pd.DataFrame) -> pd.Series:
    """Share of the host-caused gap time by what the launching thread was doing."""
    split = _gap_time(ops)
    return split.groupby("activity")["share"].sum().sort_values(ascending=False, kind="stable")


def _breakdown(ops: pd.DataFrame) -> str:
    """What the launching thread was doing over the host-caused idle, each activity with the
    CPU ranges it was in (one population: every share is of that idle): ``data loading 83%
    (enumerate(DataLoader)#...__next__ 83%), other CPU work 12% (aten::addmm 7%, 5% in no
    one CPU range)``."""
    split = _gap_time(ops)
    parts = []
    for activity, share in _activities(ops).items():
        if share < MIN_SHOWN_SHARE:
            continue
        mine = split[(split["activity"] == activity) & (split["share"] >= MIN_SHOWN_SHARE)]
        named = mine[mine["range"] != _NO_RANGE].head(RANGES_SHOWN)
        words = [f"{r} {v:.0%}" for r, v in zip(named["range"], named["share"], strict=True)]
        loose = float(mine.loc[mine["range"] == _NO_RANGE, "share"].sum())
        words += [f"{loose:.0%} in no one CPU range"] if loose >= MIN_SHOWN_SHARE else []
        parts.append(f"{activity} {share:.0%}" + (f" ({', '.join(words)})" if words else ""))
    return ", ".join(parts)


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


def _chain(chain: object, op: object) -> tuple[str, ...]:
    """A stretch's CPU ranges, outermost first, ending at the one covering most of it
    (waiting/host_path.py's ``host_chain``; a table without it: that range alone)."""
    if isinstance(chain, str) and chain:
        return tuple(chain.split(" > "))
    return (op,) if isinstance(op, str) and op != _NO_RANGE else ()


def _items(inp: FindingInput) -> tuple[tuple[Evidence, ...], tuple[int, ...]]:
    """The host-caused stretches without GPU work (waiting/host_path.py), longest first, each with
    the CPU ranges the launching thread was in (outermost first) and the GPU op that ended
    it; and their steps."""
    gaps = inp.table("host_gaps")
    if gaps.empty or "cause" not in gaps:
        return (), ()
    gaps = gaps[gaps["cause"].isin(HOST_CAUSES)].assign(dur_us=gaps["end_us"] - gaps["start_us"])
    if "host_chain" not in gaps:
        gaps = gaps.assign(host_chain=None)
    steps = steps_at(inp.steps, gaps["rank"].to_numpy(), gaps["start_us"].to_numpy())
    gaps = gaps.assign(step=pd.Series(steps, index=gaps.index, dtype=object))
    gaps = gaps.sort_values("dur_us", ascending=False, kind="stable")
    items = tuple(
        Evidence(
            int(g.rank),
            g.step,
            float(g.start_us),
            float(g.dur_us),
            _chain(g.host_chain, g.host_op),
            g.late_op if isinstance(g.late_op, str) else None,
        )
        for g in gaps.head(MAX_ITEMS).itertuples(index=False)
    )
    return items, tuple(sorted({int(s) for s in steps if s is not None}))


def _summary(inp: FindingInput, per_rank: pd.Series, stake: float) -> str:
    """The stake, its share of the step and the worst rank's; over the idle part of it, what
    the launching thread was doing and in which CPU ranges (:func:`_breakdown`); the GPU ops
    per step and how often one was launched."""
    step_us = inp.step_us
    worst = int(per_rank.idxmax())
    own = inp.ranks.set_index("rank")["step_time_per_step_us"].reindex(per_rank.index)
    idle_cols = [f"idle_{c}_per_step_us" for c in HOST_CAUSES]
    idle = float(inp.ranks[[c for c in idle_cols if c in inp.ranks]].fillna(0.0).sum(axis=1).mean())
    doing = _breakdown(inp.host_ops)
    steps = inp.steps
    num_ops = float(steps["num_gpu_ops"].mean()) if "num_gpu_ops" in steps else 0.0
    return (
        f"{stake:,.0f} µs/step ({stake / step_us:.0%} of the step) of GPU idle or late-issued "
        f"communication waits on the host, rank {worst} worst at {per_rank[worst]:,.0f} µs/step "
        f"({per_rank[worst] / float(own.loc[worst]):.0%})"
        + (
            f"; over the {idle:,.0f} µs/step of that GPU idle, the launching thread was doing "
            f"(each stretch named by the innermost CPU range covering most of it): {doing}"
            if doing
            else ""
        )
        + (
            f"; {num_ops:,.0f} GPU ops per step, one launched every "
            f"{step_us / num_ops:,.1f} µs of the step on average"
            if num_ops > 0
            else ""
        )
    )


def find(inp: FindingInput) -> list[Finding]:
    """The host-starved finding when its stake passes the threshold."""
    ranks = inp.ranks
    if ranks.empty or "idle_host_bound_per_step_us" not in ranks:
        return []
    per_rank = _per_step(ranks)
    stake = float(per_rank.mean())
    if not inp.at_stake(stake):
        return []
    own = ranks.set_index("rank")["step_time_per_step_us"].reindex(per_rank.index)
    items, at_steps = _items(inp)
    return [
        Finding(
            FindingKind.HOST_STARVED,
            stake,
            "the GPU is starved by its host",
            _summary(inp, per_rank, stake),
            _levers(inp, _activities(inp.host_ops), stake),
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
