"""How long each rank idles before a unit's compute, and how long that compute takes, by link
rate, configuration and phase, over what-if validation sweeps.

    python benchmarks/whatif_idle.py SWEEP_DIR [SWEEP_DIR ...] [--out FILE.json]

Each SWEEP_DIR is an ``overlapscope sweep`` output (``runs/<config>/rep-<k>/``), as
``benchmarks/whatif_sweeps.sh`` writes them. Per run, the counted steps' ``ovs/<fwd|bwd>/<unit>``
compute ranges of the non-root units; ``idle_us`` is the time from the end of the rank's
previous compute or issue range to the start of this one (waiting on a collective, or
nothing to do). Printed and written: the mean over the runs of each (link rate,
configuration, phase) of the mean duration and idle. This is the evidence behind
docs/WHATIF.md's forward-speed-at-the-target's-rate (overlapscope/sim/across.py): forward
idles alike under every backward policy at one rate, backward does not.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from overlapscope.analysis import analyze
from overlapscope.manifest import read_manifest
from overlapscope.trace.run.loader import load_run


def compute_with_idle(run: Path) -> pd.DataFrame:
    """The run's unit compute rows with the idle before each."""
    a = analyze(load_run(run, progress=False))
    counted = pd.DataFrame(
        [(r, s) for r, steps in a.counted_steps.items() for s in steps], columns=["rank", "step"]
    )
    tl = a.timeline.merge(counted, on=["rank", "step"])
    th = tl[tl["lane"].isin(["compute", "issue"])].sort_values(["rank", "start_us"])
    prev_end = th.groupby("rank")["end_us"].transform(lambda v: v.shift(1).cummax())
    th = th.assign(idle_us=(th["start_us"] - prev_end).clip(lower=0))
    unit = th["unit"].astype(str)
    rows = th[(th["lane"] == "compute") & (unit != "root") & th["phase"].isin(["fwd", "bwd"])]
    return rows.assign(phase=rows["phase"].astype(str))[["phase", "dur_us", "idle_us"]]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="+", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    per_run = []
    for run in sorted(p for s in args.sweeps for p in s.glob("runs/*/rep-*")):
        meta = read_manifest(run)
        if meta is None:
            continue
        rows = compute_with_idle(run).groupby("phase")[["dur_us", "idle_us"]].mean()
        rows = rows.reset_index().assign(link_gbit=meta.link_gbit, config=run.parent.name)
        per_run.append(rows)
    if not per_run:
        print(f"no runs under {args.sweeps}", file=sys.stderr)
        return 2
    table = (
        pd.concat(per_run)
        .groupby(["link_gbit", "config", "phase"])[["dur_us", "idle_us"]]
        .agg(["mean", "count"])
    )
    shown = pd.DataFrame(
        {
            "compute_ms": table[("dur_us", "mean")] / 1e3,
            "idle_before_ms": table[("idle_us", "mean")] / 1e3,
            "runs": table[("dur_us", "count")],
        }
    )
    print(shown.round(2).to_string())
    if args.out:
        flat = table.reset_index()
        flat.columns = ["_".join(c).strip("_") for c in flat.columns]
        doc = {
            "command": "python benchmarks/whatif_idle.py " + " ".join(map(str, args.sweeps)),
            "rows": flat.to_dict(orient="records"),
        }
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
