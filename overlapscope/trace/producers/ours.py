"""overlapscope's own engine: ``ovs/<phase>/<unit>`` ranges (``trace/naming/ranges.py``).

GPU kernels belong to the ``ovs`` range holding their launch (compute kernels get its unit
too); the engine's folded gloo transfers to the issue range they came from; gloo's own
collectives (``no_shard``'s all-reduce) by issue order on the comm thread (the k-th op is
the k-th issue range left).
"""

from __future__ import annotations

import numpy as np

from overlapscope.arrays import BoolArray, IntArray
from overlapscope.phases import COMM_PHASES, COPY_PHASES, CollectiveKind, Lane, Phase
from overlapscope.trace.attribution import Labels, RowContext, innermost_containing
from overlapscope.trace.naming.ranges import parse_range
from overlapscope.trace.producers.base import RangeRule

OVS_COMM_GROUP = "ovs-comm"


class Ours:
    name = "overlapscope"
    infers_schedule = False  # (run.json says the schedule: sim/facts.py reads it)

    def recognizes(self, cats: list[str], present: BoolArray) -> bool:
        return any(present[i] and parse_range(c) is not None for i, c in enumerate(cats))

    def rule(self, name: str) -> RangeRule | None:
        """An ``ovs/<phase>/<unit>`` range: its phase's lane, its phase and unit."""
        r = parse_range(name) if name.startswith("ovs/") else None
        return RangeRule(r.phase.lane, r.phase, r.unit) if r is not None else None

    def label(
        self, ctx: RowContext, out: Labels, cats: list[str], codes: IntArray, warnings: list[str]
    ) -> None:
        is_ovs = np.asarray([parse_range(c) is not None for c in cats], dtype=bool)
        label_overlapscope(ctx, out, is_ovs.reshape(len(cats))[codes], warnings)


def label_overlapscope(
    ctx: RowContext, out: Labels, is_ovs: BoolArray, warnings: list[str]
) -> None:
    """overlapscope runs: GPU kernels by their launching ``ovs`` range (compute kernels get
    their unit too); CPU gloo ops by issue order on the comm thread."""
    ts, tid = ctx.ts, ctx.tid
    issue_values = {p.value for p in COMM_PHASES}
    ovs_rows = np.flatnonzero(is_ovs & ~ctx.on_gpu)
    gpu_rows = np.flatnonzero(
        ctx.on_gpu & np.isin(out.lane, [Lane.COMM.value, Lane.COMPUTE.value, Lane.MEMORY.value])
    )
    for t in np.unique(ctx.anchor_tid[gpu_rows]):
        rng = ovs_rows[tid[ovs_rows] == t]
        q = gpu_rows[ctx.anchor_tid[gpu_rows] == t]
        hit = innermost_containing(ts[rng], ctx.end[rng], ctx.anchor_ts[q])
        ok = hit >= 0
        out.phase[q[ok]] = out.phase[rng[hit[ok]]]
        out.unit[q[ok]] = out.unit[rng[hit[ok]]]
    # A comm kernel carries its issue phase; a compute kernel only a compute phase.
    comm_gpu = gpu_rows[out.lane[gpu_rows] == Lane.COMM.value]
    bad = np.asarray([p not in issue_values for p in out.phase[comm_gpu]], dtype=bool)
    out.phase[comm_gpu[bad]] = None
    # A memory kernel (memcpy) carries a phase only when launched in an offload copy range.
    mem_gpu = gpu_rows[out.lane[gpu_rows] == Lane.MEMORY.value]
    copy_values = {p.value for p in COPY_PHASES}
    not_copy = np.asarray([p not in copy_values for p in out.phase[mem_gpu]], dtype=bool)
    out.phase[mem_gpu[not_copy]] = None
    out.unit[comm_gpu[bad]] = None

    cpu_comm = _label_folded(ctx, out)  # what is left: gloo's own collectives (all-reduce)
    if len(cpu_comm) == 0:
        return
    issue = ovs_rows[np.isin(out.phase[ovs_rows], list(issue_values))]
    issue = issue[np.argsort(ts[issue], kind="stable")]
    if len(issue) == 0:
        warnings.append("overlapscope ranges but no ovs issue ranges: gloo ops left unlabelled")
        return
    comm_tid = _comm_thread(ctx, out, cpu_comm, issue)
    ops = cpu_comm[(tid[cpu_comm] == comm_tid) & (ts[cpu_comm] >= ts[issue[0]])]
    ops = ops[np.argsort(ts[ops], kind="stable")]
    m = min(len(ops), len(issue))
    if len(ops) != len(issue):
        warnings.append(
            f"{len(issue)} ovs issue ranges but {len(ops)} gloo ops on the comm thread "
            f"{comm_tid}: matched the first {m} in order"
        )
    out.phase[ops[:m]] = out.phase[issue[:m]]
    out.unit[ops[:m]] = out.unit[issue[:m]]
    out.group[ops] = OVS_COMM_GROUP
    mismatch = sum(
        CollectiveKind(k) not in Phase(p).kinds
        for k, p in zip(out.kind[ops[:m]], out.phase[issue[:m]], strict=True)
    )
    if mismatch:
        warnings.append(
            f"{mismatch} of {m} gloo ops do not match the kind of their ovs issue range; "
            "per-unit figures may be shifted"
        )


def _label_folded(ctx: RowContext, out: Labels) -> IntArray:
    """The engine's gloo transfers, folded on the thread that issued them (trace/recognize/p2p.py),
    take
    their issue range's phase and unit (forward and backward issue from different threads on
    CUDA); returns the CPU comm rows left (gloo's own collectives)."""
    cpu_comm = ctx.comm_rows[~ctx.on_gpu[ctx.comm_rows]]
    folded = cpu_comm[ctx.issued_by[cpu_comm] >= 0]
    out.phase[folded] = out.phase[ctx.issued_by[folded]]
    out.unit[folded] = out.unit[ctx.issued_by[folded]]
    out.group[folded] = OVS_COMM_GROUP
    return cpu_comm[ctx.issued_by[cpu_comm] < 0]


def _comm_thread(ctx: RowContext, out: Labels, cpu_comm: IntArray, issue: IntArray) -> int:
    """The gloo thread whose ops, in order, best match the kinds of the issue ranges (the
    default process group may run other ops, e.g. a barrier, on its own threads)."""
    best: tuple[int, int, int] | None = None  # (kind matches, -|count difference|, tid)
    for t in np.unique(ctx.tid[cpu_comm]):
        ops = cpu_comm[(ctx.tid[cpu_comm] == t) & (ctx.ts[cpu_comm] >= ctx.ts[issue[0]])]
        m = min(len(ops), len(issue))
        ops = ops[np.argsort(ctx.ts[ops], kind="stable")][:m]
        expected = [Phase(p).kinds for p in out.phase[issue[:m]]]
        score = sum(CollectiveKind(k) in e for k, e in zip(out.kind[ops], expected, strict=True))
        cand = (score, -abs(len(ops) - len(issue)), int(t))
        if best is None or cand > best:
            best = cand
    assert best is not None  # cpu_comm is not empty
    return best[2]
