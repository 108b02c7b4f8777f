"""HTA 0.5.0, run live, beside ours on every shared external trace and GPU fixture.

    python scripts/hta_agreement.py [NAME_SUBSTRING ...]      # from the repository root

Prints a Markdown table, one row per rank: HTA's overlap (default steps / all steps), ours;
HTA's temporal breakdown over all steps (kernel span / idle / compute / non-compute, µs),
ours with HTA's rounding (``analyze(run, hta_rounding=True)``) and exact. What a rule that
figures depend on must be compared with before and after it changes (HTA is slow: a few
minutes for all of them on 2 cores).
"""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

from overlapscope.analysis import analyze
from overlapscope.analysis.hta.report import HtaStatus, run_hta
from overlapscope.trace.run.loader import RunTraces, load_run

REPO = Path(__file__).resolve().parents[1]
EXTERNAL = REPO.parent / "shared" / "external-traces"
HTA_TEMPORAL = ("kernel_time_us", "idle_time_us", "compute_time_us", "non_compute_time_us")
OURS = ("step_time_total_us", "idle_total_us", "compute_total_us")
BUSY = ("exposed_comm_total_us", "exposed_memory_total_us", "other_total_us")


def inputs() -> list[Path]:
    shared = sorted(EXTERNAL.glob("*.json.gz")) if EXTERNAL.is_dir() else []
    return shared + sorted(p for p in (REPO / "traces").glob("gpu-*") if p.is_dir())


def _pct(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}"


def _hta(run: RunTraces, last: bool) -> tuple[dict[int, float], dict[int, str]] | str:
    report = run_hta(run, include_last_profiler_step=last)
    if report.status != HtaStatus.RAN:
        return report.status
    temporal: dict[int, str] = {}
    if report.temporal is not None:
        for _, row in report.temporal.iterrows():
            temporal[int(row["rank"])] = " / ".join(f"{row[c]:.0f}" for c in HTA_TEMPORAL)
    return report.overlap_pct, temporal


def _ours(run: RunTraces, rounding: bool) -> dict[int, tuple[float, str]]:
    ranks = analyze(run, hta_rounding=rounding).ranks
    out = {}
    for _, r in ranks.iterrows():
        figures = [r[c] for c in OURS] + [sum(r[c] for c in BUSY)]
        out[int(r["rank"])] = (float(r["overlap_pct"]), " / ".join(f"{v:.0f}" for v in figures))
    return out


def rows(path: Path) -> list[str]:
    run = load_run(path, allow_missing_ranks=True)
    if not run.has_gpu:
        return [f"| {path.name} | | CPU only: HTA not run | | | | |"]
    default, every = _hta(run, last=False), _hta(run, last=True)
    exact, rounded = _ours(run, rounding=False), _ours(run, rounding=True)
    out = []
    for rank, (pct, figures) in exact.items():
        if isinstance(every, str) or isinstance(default, str):
            hta_pct, hta_t = str(every if isinstance(every, str) else default)[:40], "-"
        else:
            hta_pct = f"{_pct(default[0].get(rank))} / {_pct(every[0].get(rank))}"
            hta_t = every[1].get(rank, "-")
        out.append(
            f"| {path.name} | {rank} | {hta_pct} | {_pct(pct)} | {hta_t} | "
            f"{rounded[rank][1]} | {figures} |"
        )
    return out


def main(only: list[str]) -> None:
    print(
        "| trace | rank | HTA overlap % default / all | ours | HTA span / idle / compute / "
        "non-compute (all steps) | ours, HTA rounding | ours, exact |"
    )
    print("|---|---|---|---|---|---|---|")
    for path in inputs():
        if not only or any(o in path.name for o in only):
            print("\n".join(rows(path)), flush=True)


if __name__ == "__main__":
    warnings.filterwarnings("ignore")  # HTA's own pandas warnings
    main(sys.argv[1:])
