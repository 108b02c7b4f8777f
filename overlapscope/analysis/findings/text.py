"""A finding as ``diagnose`` prints it: made from its fields only (title, stake, ranks,
steps, phase, cause, the summary, the strongest evidence items, the levers)."""

from __future__ import annotations

from collections.abc import Sequence

from overlapscope.analysis.findings import Evidence, Finding, Lever

# Evidence items printed per finding (the JSON has them all).
SHOWN_ITEMS = 3
_OP_CHARS = 80


def _span(values: Sequence[int]) -> str:
    """``3`` / ``2-5`` (consecutive) / ``1, 4, 7``."""
    v = sorted(values)
    if len(v) > 2 and v == list(range(v[0], v[-1] + 1)):
        return f"{v[0]}-{v[-1]}"
    return ", ".join(str(x) for x in v)


def where_line(f: Finding) -> str:
    """``ranks 4, 5 · steps 3-4 · phase backward · cause late_peer`` (what it has of them)."""
    parts = []
    if f.ranks:
        parts.append(f"rank{'s' if len(f.ranks) > 1 else ''} {_span(f.ranks)}")
    if f.steps:
        parts.append(f"step{'s' if len(f.steps) > 1 else ''} {_span(f.steps)}")
    parts += [f"phase {f.phase}"] if f.phase else []
    parts += [f"cause {f.cause}"] if f.cause else []
    return " · ".join(parts)


def _short(op: str) -> str:
    return op if len(op) <= _OP_CHARS else op[: _OP_CHARS - 1] + "…"


def item_line(e: Evidence) -> str:
    """``rank 7, step 3 +1,234 µs: 5,678 µs, CPU a > b > c, GPU op`` (its start from the
    step's first GPU op: the text does not depend on where the trace's clock starts)."""
    where = [f"rank {e.rank}"]
    if e.step is not None:
        at = f" {e.in_step_us:+,.0f} µs" if e.in_step_us is not None else ""
        where.append(f"step {e.step}{at}")
    what = [f"{e.dur_us:,.0f} µs" + ("" if e.start_us is not None else " in all")]
    what += [f"CPU {' > '.join(e.cpu_ops)}"] if e.cpu_ops else []
    what += [f"GPU {_short(e.gpu_op)}"] if e.gpu_op else []
    what += [_MEASURE_WORDS.get(k, k).format(v) for k, v in e.measures]
    return f"{', '.join(where)}: {', '.join(what)}"


# How an item's measures read (a measure not named here: its key and value).
_MEASURE_WORDS = {
    "op_us": "GPU ops {:,.0f} µs",
    "launch_median_us": "median launch call {:,.1f} µs",
    "idle_us": "idle {:,.0f} µs",
    "num_ops": "{:,.0f} GPU ops",
}


def lever_line(lv: Lever, finding_stake_us: float) -> str:
    """``lever (why; its stake where it is not the finding's)``."""
    own = lv.stake_us is not None and lv.stake_us != finding_stake_us
    stake = f"{lv.stake_us:,.0f} µs/step at stake" if own else ""
    why = "; ".join(x for x in (lv.why, stake) if x)
    return f"{lv.lever}" + (f" ({why})" if why else "")


def finding_lines(i: int, f: Finding) -> list[str]:
    """The lines of finding number ``i``."""
    named = f.rank is not None and f"rank {f.rank}" not in f.title
    lines = [
        f"{i}. {f.title}{f' (rank {f.rank})' if named else ''}: {f.stake_us:,.0f} µs/step at stake"
    ]
    if where := where_line(f):
        lines.append(f"   {where}")
    lines.append(f"   evidence: {f.summary}")
    lines += [f"     - {item_line(e)}" for e in f.evidence[:SHOWN_ITEMS]]
    if len(f.evidence) > SHOWN_ITEMS:
        lines.append(f"     (and {len(f.evidence) - SHOWN_ITEMS} more in --json)")
    lines += [f"   try: {lever_line(lv, f.stake_us)}" for lv in f.levers]
    return lines
