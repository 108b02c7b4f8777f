"""What the CLI, the JSON and ``diagnose`` say about clocks and the critical path.

Pure functions from the offsets table (:mod:`overlapscope.analysis.clocks.alignment`) and the
:class:`~overlapscope.analysis.critical_path.path.CriticalPath`: no printing, no files.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from overlapscope.analysis.critical_path.path import SHORTEN, CriticalPath
from overlapscope.phases import Phase

GROUP = ["rank", "kind", "unit", "phase", "host_activity", "host_op"]
_PHASE_WORDS = {p.value: p.words for p in Phase}


def _work(kind: str, unit: object, phase: object) -> str:
    """``backward all-gather of blocks.1``: the phase's words and the unit (the kind's name
    where the link has no phase)."""
    what = _PHASE_WORDS.get(phase, phase) if isinstance(phase, str) else None
    of = f" of {unit}" if isinstance(unit, str) else ""
    return f"{what or kind}{of}"


def link_name(
    rank: int, kind: str, unit: object, phase: object, host: tuple[object, object] = (None, None)
) -> str:
    """What a link of the path is, for each kind: ``rank 3's forward of blocks.7``, ``rank
    0's exposed reduce-scatter of blocks.1``, ``rank 1's wait for the backward all-gather of
    blocks.2``, ``rank 1's host (data loading, in enumerate(DataLoader)#...)`` (``host``: a
    host link's activity and op, waiting/host_path.py), ``rank 2's idle time (nothing traced)``."""
    if kind == "host":
        activity, op = (h if isinstance(h, str) else None for h in host)
        detail = ", in ".join(x for x in (activity, op) if x)
        return f"rank {rank}'s host" + (f" ({detail})" if detail else "")
    if kind == "comm":
        return f"rank {rank}'s exposed {_work('communication', unit, phase)}"
    if kind == "wait":
        has_work = isinstance(phase, str) or isinstance(unit, str)
        on = f"the {_work('communication', unit, phase)}" if has_work else "communication"
        return f"rank {rank}'s wait for {on}"
    if kind == "idle":
        return f"rank {rank}'s idle time (nothing traced)"
    return f"rank {rank}'s {_work(kind, unit, phase)}"


def path_groups(path: CriticalPath) -> pd.DataFrame:
    """Per (rank, kind, unit, phase) on the path: ``dur_us_per_step`` (mean over all path
    steps), ``num_steps`` it appears in, ``saving_us`` the best replayed 10% saving."""
    links = path.links.astype({"unit": object, "phase": object})
    num = max(len(path.steps), 1)
    host = "host_op" in links and bool((links["kind"] == "host").any())
    keys = GROUP if host else GROUP[:4]  # (host links' activity and op: only where there are)
    g = links.groupby(keys, dropna=False, sort=False)
    out = g.agg(
        dur_us=("dur_us", "sum"), num_steps=("step", "nunique"), saving_us=("saving_us", "max")
    ).reset_index()
    out["dur_us_per_step"] = out["dur_us"] / num
    return out.sort_values("dur_us_per_step", ascending=False, ignore_index=True)


def clock_lines(offsets: pd.DataFrame, applied: bool, shared_host: str | None = None) -> list[str]:
    """The clocks: each rank's offset, the interval causality leaves it (the trace proves it
    is there), how far the truth may be from what was applied, and whether it was."""
    if len(offsets) < 2:
        return []
    ref = int(offsets["reference_rank"].iloc[0])
    if not applied:
        head = f"clocks: not aligned (--no-align); estimated offsets against rank {ref}:"
    else:
        head = (
            f"clocks: aligned on rank {ref}'s clock from the ends of matched collectives, "
            "every estimate applied (--no-align turns it off); causality bounds each offset "
            "(no collective ends before its last rank started it)"
        )
    if shared_host is not None:
        others = offsets[offsets["rank"] != ref]
        holds = bool(((others["lo_us"] <= 0) & (others["hi_us"] >= 0)).all())
        verdict = (
            "the bounds contain 0, as they must"
            if holds
            else "the bounds exclude 0: the timestamps were moved after the run, and are put back"
        )
        head += f"; every rank ran on {shared_host} (run.json), one clock: {verdict}"
    lines = [head]
    for r in offsets[offsets["rank"] != ref].itertuples(index=False):
        bounds = f"within {_us(r.lo_us)} .. {_us(r.hi_us)} µs by causality"
        allow = f"comparisons allow {_us(r.uncertainty_us, sign=False)} µs"
        if np.isnan(r.offset_us):
            lines.append(
                f"  rank {r.rank}: too few collectives ({r.num_collectives}) to estimate; "
                f"{bounds}; {allow}"
            )
            continue
        lines.append(
            f"  rank {r.rank}: offset {r.offset_us:+,.1f} µs ({bounds}; the ends put it in "
            f"{_us(r.plausible_lo_us)} .. {_us(r.plausible_hi_us)}; {allow}), ± "
            f"{r.stderr_us:,.1f} (spread {r.spread_us:,.1f} µs over {r.num_collectives} "
            f"collectives), drift {r.drift_ppm:+.2f} ppm"
            + ("" if r.aligned or not applied else ", not applied")
        )
    return lines


def _us(value: float, sign: bool = True) -> str:
    if not np.isfinite(value):
        return "unbounded" if not sign else ("-inf" if value < 0 else "+inf")
    return f"{value:+,.0f}" if sign else f"{value:,.0f}"


def _name(link: pd.Series) -> str:
    host = (link.get("host_activity"), link.get("host_op"))
    return link_name(int(link["rank"]), str(link["kind"]), link["unit"], link["phase"], host)


def _shortened(b: pd.Series) -> str:
    """What the best what-if shortens, in words: a matched collective on every rank
    (critical_path's savings), any other link on its own rank; a host link with the op whose
    launch it makes sooner."""
    step, seq = int(b["step"]), b.get("seq")
    if b["kind"] == "comm" and pd.notna(seq) and int(seq) >= 0:
        what = _work("collective", b["unit"], b["phase"])
        return (
            f"the {what} (group {b['group']}, step {step}, seq {int(seq)}) on every rank by "
            f"{SHORTEN:.0%}"
        )
    late = b.get("late_op") if b["kind"] == "host" else None
    sooner = f", so it launches {late} sooner" if isinstance(late, str) else ""
    return f"{_name(b)} (step {step}, {float(b['dur_us']):,.0f} µs) by {SHORTEN:.0%}{sooner}"


def path_paragraph(path: CriticalPath) -> str:
    """One paragraph: what sets the step, most of the path, and the best 10% saving."""
    steps = path.steps
    if steps.empty:
        return ""
    step_us = float(steps["step_us"].mean())
    kinds = ("compute", "comm", "wait", "host", "idle")
    shares = ", ".join(
        f"{k} {float(steps[f'{k}_us'].sum()) / float(steps['step_us'].sum()):.0%}"
        for k in kinds
        if f"{k}_us" in steps
    )
    groups = path_groups(path)
    work = groups[groups["kind"] != "idle"]  # idle says where nothing was traced, not what
    top = (work if len(work) else groups).iloc[0]
    text = (
        f"critical path over {len(steps)} steps (mean step {step_us:,.0f} µs): "
        f"{shares} of the step (comm: exposed transfer; host: the GPU waits for the CPU "
        f"thread that launches its next work); it changes rank "
        f"{float(steps['num_hops'].mean()):.1f} times per step. Most of it: "
        f"{_name(top)}, {float(top['dur_us_per_step']):,.0f} µs/step, on the path in "
        f"{int(top['num_steps'])} of {len(steps)} steps."
    )
    best = path.links.dropna(subset=["saving_us"])
    if not best.empty:
        b = best.loc[best["saving_us"].idxmax()]
        text += (
            f" Shortening {_shortened(b)} saves {float(b['saving_us']):,.0f} µs of the step "
            "(replayed)."
        )
    return text


def report_text(
    offsets: pd.DataFrame | None,
    applied: bool,
    path: CriticalPath | None,
    shared_host: str | None = None,
) -> str:
    lines = clock_lines(offsets, applied, shared_host) if offsets is not None else []
    para = path_paragraph(path) if path is not None else ""
    if para:
        lines.append(para)
    return "".join(f"{line}\n" for line in lines)


def to_json(
    offsets: pd.DataFrame | None,
    applied: bool,
    path: CriticalPath | None,
    shared_host: str | None = None,
) -> dict[str, Any]:
    """The ``clocks`` and ``critical_path`` sections of the JSON report (docs/ANALYSIS.md)."""
    return {
        "clocks": {
            "applied": applied,
            "shared_host": shared_host,
            "offsets": [] if offsets is None else _records(offsets),
        },
        "critical_path": {
            "steps": [] if path is None else _records(path.steps),
            "links": [] if path is None else _records(path.links),
        },
    }


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = json.loads(df.to_json(orient="records", double_precision=15))
    return out
