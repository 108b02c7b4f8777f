"""``overlapscope whatif RUN_DIR --policy P ...``: predict another configuration from one run.

Calibrates a model of the measured run (compute per unit and phase, a fitted link model per
collective kind, issue order, per-rank skew) and replays one step under the scenario; prints
predicted vs measured step time, exposed communication, NCCL wait and peak memory, and can
write the predicted timeline as a run directory (``--trace``). See docs/WHATIF.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from overlapscope.commands.run import add_limit_flag
from overlapscope.errors import UserError
from overlapscope.sim.export import write_predicted_run
from overlapscope.sim.predict import load_calibration, predict_from
from overlapscope.sim.schedule import Policy, Scenario


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "whatif",
        help="predict step time and memory under another policy or network from one run",
        description="Predict step time, exposed communication, NCCL wait and peak memory of "
        "another prefetch configuration or network from one measured overlapscope run.",
    )
    p.add_argument(
        "run_dir", type=Path, metavar="RUN_DIR", help="a run written by overlapscope run"
    )
    p.add_argument(
        "--policy",
        required=True,
        choices=[x.value for x in Policy],
        help="backward prefetch policy to predict",
    )
    p.add_argument("--forward-prefetch", action="store_true", help="prefetch in forward too")
    add_limit_flag(p)
    net = p.add_mutually_exclusive_group()
    net.add_argument(
        "--link-gbit", type=float, metavar="R", help="predict on a shaped link of R Gbit/s"
    )
    net.add_argument(
        "--bandwidth-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="multiply the measured bus bandwidth by X",
    )
    p.add_argument("--json", metavar="FILE", help="write the prediction as JSON ('-': stdout)")
    p.add_argument(
        "--trace", type=Path, metavar="DIR", help="write the predicted timeline as a run directory"
    )
    p.add_argument("--force", action="store_true", help="replace --trace if it is a run")
    p.set_defaults(func=run)
    return p


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    try:
        return Scenario(
            policy=Policy(args.policy),
            forward_prefetch=args.forward_prefetch,
            limit_all_gathers=args.limit_all_gathers,
            bandwidth_scale=args.bandwidth_scale,
            link_gbit=args.link_gbit,
        )
    except ValueError as e:
        flag = str(e).split()[0].replace("_", "-")
        raise UserError(f"--{flag}: {e}") from None


def _fmt_us(v: float) -> str:
    return f"{v / 1e3:10.1f} ms"


def run(args: argparse.Namespace) -> int:
    scenario = scenario_from_args(args)
    if not args.run_dir.is_dir():
        raise UserError(f"{args.run_dir}: not a directory; give a run written by overlapscope run")
    pred = predict_from(load_calibration(args.run_dir), scenario)
    if not math.isfinite(pred.step_time_us):
        raise UserError(f"{args.run_dir}: the replay produced no step time")
    if args.trace is not None:
        write_predicted_run(pred, args.trace, force=args.force)
    doc = pred.to_json_dict()
    if args.trace is not None:
        doc["trace_dir"] = str(args.trace)
    if args.json == "-":
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    m = pred.calibration.measured
    print(
        f"what-if {scenario.label}  (measured: {m.scenario.label}, link {m.link_gbit or 'unshaped'})"
    )
    print(f"  {'':18}{'measured':>14}{'predicted':>14}")
    for row in pred.table().itertuples():
        if row.metric == "peak_mem_bytes":
            a, b = f"{row.measured_source / 2**20:10.1f} MiB", f"{row.predicted / 2**20:10.1f} MiB"
        else:
            a, b = _fmt_us(row.measured_source), _fmt_us(row.predicted)
        print(f"  {row.metric:18}{a:>14}{b:>14}")
    print(f"  max alive units in backward: {pred.max_alive_in_backward}")
    if args.trace is not None:
        print(f"predicted timeline: {args.trace}")
    return 0
