"""Text renderings of a :class:`RunAnalysis` (plain strings; the CLI prints them)."""

from __future__ import annotations

import math

import pandas as pd

from overlapscope.analysis.api import RunAnalysis
from overlapscope.analysis.waiting.idle import CAUSES
from overlapscope.phases import COPY_PHASES, values

TOP_N = 10


def _fmt(v: object, digits: int = 0) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def _table(df: pd.DataFrame, columns: dict[str, tuple[str, int]]) -> list[list[str]]:
    return [
        [_fmt(getattr(row, col), digits) for col, (_, digits) in columns.items()]
        for row in df.itertuples(index=False)
    ]


# Every time column of this table is a mean per counted step (``*_per_step_us``); the
# parts from compute to idle add up to the step.
RANK_COLUMNS = {
    "rank": ("rank", 0),
    "num_steps": ("steps", 0),
    "step_time_per_step_us": ("step", 0),
    "compute_per_step_us": ("compute", 0),
    "exposed_comm_per_step_us": ("exposed comm", 0),
    "exposed_memory_per_step_us": ("exposed copy", 0),
    "other_per_step_us": ("other", 0),
    "idle_per_step_us": ("idle", 0),
    "comm_per_step_us": ("comm (all)", 0),
    "overlap_pct": ("overlap %", 2),
    "nccl_wait_per_step_us": ("wait", 0),
}
# The parts of exposed communication (waiting/comm_causes.py) and the causes of idle
# (waiting/idle.py), as
# the tables' headers name them.
EXPOSED_PARTS = {"host_late": "issued late", "peer_wait": "last rank", "transfer": "transfer"}
_IDLE_LABELS = {"host_bound": "host-bound", "cross_stream": "cross-stream"}
UNIT_COLUMNS = {
    "rank": ("rank", 0),
    "unit": ("unit", 0),
    "phase": ("phase", 0),
    "kind": ("kind", 0),
    "num_ops": ("ops", 0),
    "comm_per_step_us": ("comm µs/step", 0),
    "exposed_per_step_us": ("exposed µs/step", 0),
    **{f"exposed_{p}_per_step_us": (label, 0) for p, label in EXPOSED_PARTS.items()},
}
# Where the GPU waits (issue 30): idle by cause and exposed communication by cause, µs per
# counted step; each group adds up to its total.
WAIT_COLUMNS = {
    "rank": ("rank", 0),
    "idle_per_step_us": ("idle", 0),
    **{f"idle_{c}_per_step_us": (_IDLE_LABELS.get(c, c), 0) for c in CAUSES},
    "exposed_comm_per_step_us": ("exposed comm", 0),
    **{f"exposed_comm_{p}_per_step_us": (label, 0) for p, label in EXPOSED_PARTS.items()},
}
LEVER_COLUMNS = {
    "rank": ("rank", 0),
    "unit": ("unit", 0),
    "phase": ("phase", 0),
    "time_per_step_us": ("µs/step", 0),
    "exposed_per_step_us": ("exposed µs/step", 0),
    "hides_comm_per_step_us": ("hides comm µs/step", 0),
}
COLLECTIVE_COLUMNS = {
    "step": ("step", 0),
    "seq": ("seq", 0),
    "kind": ("kind", 0),
    "unit": ("unit", 0),
    "bytes": ("bytes", 0),
    "num_ranks": ("ranks", 0),
    "transfer_us": ("transfer µs", 0),
    "peer_wait_us": ("peer wait µs", 0),
    "straggler_rank": ("straggler", 0),
    "busbw_gbit_s": ("busbw Gbit/s", 3),
}


def sections(a: RunAnalysis) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) of each table of the default report."""
    out = [
        (
            "Per rank, µs per counted step (step = compute + exposed comm + exposed copy "
            "+ other + idle)",
            [h for h, _ in RANK_COLUMNS.values()],
            _table(a.ranks, RANK_COLUMNS),
        ),
    ]
    if {c for c in WAIT_COLUMNS} <= set(a.ranks.columns):
        out.append(
            (
                "Where the GPU waits, µs per counted step: idle by cause (host-bound: launched "
                "after the GPU ran dry; sync: after a host sync; peer: the host in a CPU "
                "collective; cross-stream: queued behind another stream; other: launch "
                "latency) and exposed communication by cause (issued late by the host, "
                "waiting for the last rank, transfer longer than its compute)",
                [h for h, _ in WAIT_COLUMNS.values()],
                _table(a.ranks, WAIT_COLUMNS),
            )
        )
    units = (
        a.units[a.units["exposed_total_us"] > 0]
        .sort_values(["exposed_per_step_us", "rank"], ascending=[False, True], kind="stable")
        .head(TOP_N)
    )
    if len(units):
        out.append(
            (
                "Top exposed units",
                [h for h, _ in UNIT_COLUMNS.values()],
                _table(units, UNIT_COLUMNS),
            )
        )
    if len(a.collectives):
        coll = a.collectives.sort_values("peer_wait_us", ascending=False, na_position="last")
        if coll["peer_wait_us"].isna().all():
            coll = a.collectives.sort_values("transfer_us", ascending=False)
        out.append(
            (
                "Top collectives",
                [h for h, _ in COLLECTIVE_COLUMNS.values()],
                _table(
                    coll.head(TOP_N).assign(busbw_gbit_s=coll["busbw_gbps"] * 8),
                    COLLECTIVE_COLUMNS,
                ),
            )
        )
    if len(a.levers):
        out.append(
            (
                "Memory levers: recompute (checkpointing) and offload copies "
                f"({', '.join(values(COPY_PHASES))})",
                [h for h, _ in LEVER_COLUMNS.values()],
                _table(a.levers, LEVER_COLUMNS),
            )
        )
    return out


def notes(a: RunAnalysis) -> list[str]:
    """One-line facts under the tables: steps counted, bound, HTA, warnings."""
    lines = [f"warning: {w}" for w in a.warnings]
    lines += [
        "steps counted: "
        + "; ".join(
            f"rank {r}: {list(s) if s else 'whole trace'}" for r, s in a.counted_steps.items()
        )
    ]
    b = a.bound_summary
    lines.append(
        f"overlap bound (mean over ranks, µs per step): serial "
        f"{_fmt(b['serial_per_step_us'])}, ideal {_fmt(b['ideal_per_step_us'])}, actual "
        f"(compute + exposed comm) {_fmt(b['actual_per_step_us'])}, efficiency "
        f"{_fmt(b['overlap_efficiency'], 2)}"
    )
    hta = a.hta
    if hta is None:
        lines.append(
            "HTA: "
            + ("not run (pass --hta)" if a.summary.has_gpu else "not applicable: CPU-only traces")
        )
    elif hta.status == "ran":
        lines += hta_lines(a)
    else:
        lines.append(f"HTA: {hta.status}")
    return lines


def text(a: RunAnalysis) -> str:
    """The default report as plain aligned text."""
    parts: list[str] = [f"warning: {w}" for w in a.warnings]
    if parts:
        parts.append("")
    for title, headers, rows in sections(a):
        widths = [
            max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
            for i, h in enumerate(headers)
        ]
        parts.append(title)
        parts.append("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=False)))
        parts.extend("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=False)) for r in rows)
        parts.append("")
    parts.extend(n for n in notes(a) if not n.startswith("warning: "))
    return "\n".join(parts) + "\n"


def markdown(a: RunAnalysis) -> str:
    parts = ["# overlapscope analysis", ""]
    for title, headers, rows in sections(a):
        parts += [f"## {title}", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        parts += ["| " + " | ".join(r) + " |" for r in rows]
        parts.append("")
    if a.findings:
        parts += ["## Findings", ""]
        parts += [
            f"1. **{f.title}** ({f.stake_us:,.0f} µs/step): {f.summary}. Try: {f.change}"
            for f in a.findings
        ]
        parts.append("")
    parts += ["## Notes", ""] + [f"- {n}" for n in notes(a)]
    return "\n".join(parts) + "\n"


HTA_FIGURES = (  # (HTA column, ours, label)
    ("kernel_time_us", ("step_time_total_us",), "kernel span"),
    ("idle_time_us", ("idle_total_us",), "idle"),
    ("compute_time_us", ("compute_total_us",), "compute"),
    (
        "non_compute_time_us",
        ("exposed_comm_total_us", "exposed_memory_total_us", "other_total_us"),
        "non-compute",
    ),
)


def hta_lines(a: RunAnalysis) -> list[str]:
    """HTA's temporal breakdown and overlap beside ours, per rank, with the difference."""
    hta = a.hta
    assert hta is not None
    ours = a.ranks.set_index("rank")
    rounding = "rounds events to whole µs" if hta.ns_rounding else "no rounding"
    lines = [
        f"HTA 0.5.0 beside ours ({'all steps' if hta.include_last_profiler_step else 'last step dropped'}"
        f", HTA {rounding}; ours: µs totals over the counted steps, HTA - ours in brackets):"
    ]
    temporal = {} if hta.temporal is None else hta.temporal.set_index("rank").to_dict("index")
    for rank, pct in sorted(hta.overlap_pct.items()):
        mine = ours.loc[rank] if rank in ours.index else None
        parts = []
        for col, keys, label in HTA_FIGURES:
            theirs = temporal.get(rank, {}).get(col)
            if theirs is None or mine is None:
                continue
            value = float(sum(mine[k] for k in keys))
            parts.append(f"{label} {_fmt(theirs)} vs {_fmt(value)} ({theirs - value:+,.0f})")
        if mine is not None:
            diff = pct - float(mine["overlap_pct"])
            parts.append(
                f"overlap {pct:.2f}% vs {float(mine['overlap_pct']):.2f}% ({diff:+.2f} pp)"
            )
        steps = hta.counted_steps.get(rank, [])
        lines.append(f"  rank {rank} (HTA steps {steps}): " + ", ".join(parts))
    negative = {} if hta.negative is None else hta.negative.set_index("rank").to_dict("index")
    for rank, n in sorted(negative.items()):
        if n["busy_us"] or n["compute_us"]:
            lines.append(
                f"  rank {rank}: HTA's rounding leaves sub-µs events alone with end < start and "
                f"counts them negatively: compute {n['compute_us']:+,.0f} µs, compute + "
                f"non-compute {n['busy_us']:+,.0f} µs (ours: zero length)"
            )
    return lines + hta_idle_lines(a)


HTA_IDLE = (("host_wait", "host wait"), ("kernel_wait", "kernel wait"), ("other", "other"))


def hta_idle_lines(a: RunAnalysis) -> list[str]:
    """HTA's idle-time breakdown per rank and stream beside ours in its categories
    (analysis/waiting/idle.py: its host wait is our host-bound + sync + peer gaps between a
    stream's ops)."""
    hta = a.hta
    if hta is None or hta.idle is None or hta.idle.empty or a.idle_streams.empty:
        return []
    theirs = hta.idle.pivot_table(
        index=["rank", "stream"], columns="idle_category", values="idle_time_us", aggfunc="sum"
    ).fillna(0.0)
    ours = a.idle_streams.set_index(["rank", "stream"])
    lines = ["HTA's idle time per stream beside ours (µs; HTA - ours in brackets):"]
    for rank, stream in theirs.index:
        parts = []
        for cat, label in HTA_IDLE:
            t = float(theirs.loc[(rank, stream), cat]) if cat in theirs else 0.0
            key = (rank, stream)
            o = float(ours.loc[key, f"hta_{cat}_total_us"]) if key in ours.index else float("nan")
            parts.append(f"{label} {_fmt(t)} vs {_fmt(o)} ({t - o:+,.0f})")
        lines.append(f"  rank {int(rank)} stream {int(stream)}: " + ", ".join(parts))
        lines += _negative_idle(hta.idle_negative, int(rank), int(stream))
    return lines


def _negative_idle(negative: pd.DataFrame | None, rank: int, stream: int) -> list[str]:
    """What HTA's sub-µs events with end < start change in a stream's idle split."""
    if negative is None:
        return []
    row = negative[(negative["rank"] == rank) & (negative["stream"] == stream)]
    values = {label: float(row[f"{cat}_us"].sum()) for cat, label in HTA_IDLE}
    if not any(round(v) for v in values.values()):
        return []
    said = ", ".join(f"{label} {v:+,.0f}" for label, v in values.items())
    return [f"    of which HTA's sub-µs events with end < start (measured from their end): {said}"]
