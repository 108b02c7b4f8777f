"""The flight report as text (``analyze``), and its findings as ``diagnose`` lines."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from overlapscope.analysis.findings import Finding, FindingKind
from overlapscope.flight.api import FlightReport, num_steps
from overlapscope.flight.findings import lag_floor_us


def _ranks_table(r: FlightReport) -> str:
    c = r.collectives
    floor = lag_floor_us(c)
    late = c[c["lag_us"] > floor]
    lines = [f"rank  entries  last to issue (> {floor:,.0f} µs)  lag µs (sum)  never issued"]
    for rank, mine in r.ranks.groupby("rank"):
        n_last = int((late["last_rank"] == rank).sum())
        lag = float(late.loc[late["last_rank"] == rank, "lag_us"].sum())
        never = int(
            c["never_issued_by"].fillna("").str.split(",").map(lambda v, k=str(rank): k in v).sum()
        )
        lines.append(f"{rank:>4}  {len(mine):>7,}  {n_last:>28,}  {lag:>12,.0f}  {never:>12,}")
    return "\n".join(lines)


def _late_table(c: pd.DataFrame) -> str:
    floor = lag_floor_us(c)
    late = c[(c["lag_us"] > floor) & c["step"].notna()]
    if late.empty:
        return f"no collective issued last by more than {floor:,.0f} µs"
    key = late.assign(unit=late["unit"].fillna("-"))
    g = key.groupby(["last_rank", "phase", "slot", "unit"], dropna=False)["lag_us"]
    agg = g.agg(["size", "median", "sum"]).sort_values("sum", ascending=False).head(10)
    lines = ["Late issuers (by phase, slot in the step and unit)",
             "rank   phase  slot      unit  steps  median lag µs  lag µs (sum)"]  # fmt: skip
    for (rank, phase, slot, unit), row in agg.iterrows():
        lines.append(f"{rank:>4}  {phase:>6}  {int(slot):>4}  {unit:>8}  {int(row['size']):>5}"
                     f"  {row['median']:>13,.0f}  {row['sum']:>12,.0f}")  # fmt: skip
    return "\n".join(lines)


def text(r: FlightReport) -> str:
    c = r.collectives
    fmts = sorted({"json" if p.suffix == ".json" else "pickle" for p in r.dumps})
    head = (f"Flight Recorder: {len(r.dumps)} dump(s) ({', '.join(fmts)}), {len(r.entries):,} "
            f"entries, {len(c):,} collectives in {c['pg'].nunique()} group(s), "
            f"{num_steps(c)} step(s) recognised")  # fmt: skip
    timing = "durations recorded" if c["duration_us"].notna().any() else (
        "no durations (gloo, or NCCL without TORCH_NCCL_ENABLE_TIMING=1): issue times only")  # fmt: skip
    parts = [head, r.clocks.note, r.join_note, timing, _ranks_table(r), _late_table(c)]
    parts += [f"warning: {w}" for w in r.warnings]
    return "\n".join(parts) + "\n"


def finding_lines(findings: Sequence[Finding]) -> str:
    """``diagnose``'s lines: numbered, stake, evidence, what to try."""
    out = []
    for i, f in enumerate(findings, 1):
        if f.kind is FindingKind.COLLECTIVE_HANG:
            stake = f"the job waits up to its timeout, {f.stake_us / 1e6:,.1f} s"
        else:
            stake = f"{f.stake_us:,.0f} µs/step at stake"
        where = (
            f" (rank {f.rank})" if f.rank is not None and f"rank {f.rank}" not in f.title else ""
        )
        out.append(f"{i}. {f.title}{where}: {stake}\n   evidence: {f.evidence}\n"
                   f"   try: {f.change}\n")  # fmt: skip
    return "".join(out)
