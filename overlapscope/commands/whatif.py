"""``overlapscope whatif RUN_DIR --policy P ...``: predict another configuration from one run.

``RUN_DIR`` is an ``overlapscope run`` directory or the trace directory of a torch FSDP1/FSDP2
run (CPU, gloo). Calibrates a model of the measured run (compute per unit and phase, a
fitted link model per collective kind, issue order, per-rank skew) and replays its steps
under the scenario; prints
predicted vs measured step time, exposed communication, NCCL wait and peak memory, and can
write the predicted timeline as a run directory (``--trace``). See docs/WHATIF.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from overlapscope.commands import COMMANDS
from overlapscope.commands.config_flags import add_flag
from overlapscope.commands.flags import positive_float
from overlapscope.config import EngineConfig, Policy, RunConfig
from overlapscope.errors import UserError
from overlapscope.outputs import check_apart, check_dir, check_file, write_file
from overlapscope.sim.across import Pooled, pool_runs
from overlapscope.sim.calibrate import Calibration
from overlapscope.sim.export import check_writable, write_predicted_run
from overlapscope.sim.gpu_predict import check_gpu
from overlapscope.sim.predict import Prediction, load_calibration, predict_from
from overlapscope.sim.schedule import Scenario


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "whatif",
        help=COMMANDS["whatif"].help,
        description="Predict step time, exposed communication, NCCL wait and peak memory of "
        "another prefetch configuration or network from one measured overlapscope run.",
    )
    p.add_argument(
        "run_dir",
        type=Path,
        metavar="RUN_DIR",
        help="a run written by overlapscope run, or a torch FSDP1/FSDP2 trace directory",
    )
    add_flag(p, EngineConfig, "policy", required=True, help="backward prefetch policy to predict")
    add_flag(p, EngineConfig, "forward_prefetch")
    p.add_argument(
        "--prefetch-depth",
        type=int,
        default=1,
        metavar="N",
        help="units prefetched ahead in backward (torch FSDP2's set_modules_to_backward_prefetch "
        "with N modules; default 1, as the engine and FSDP1)",
    )
    add_flag(p, EngineConfig, "limit_all_gathers")
    net = p.add_mutually_exclusive_group()
    add_flag(net, RunConfig, "link_gbit", help="predict on a shaped link of {metavar} {unit}")
    net.add_argument(
        "--bandwidth-scale",
        type=positive_float,
        default=1.0,
        metavar="X",
        help="multiply the measured bus bandwidth by X",
    )
    p.add_argument(
        "--contention-from",
        type=Path,
        nargs="+",
        metavar="RUN",
        help="calibrate across these runs of the same workload (other policies) and RUN_DIR: "
        "the compute slow-down from communication and the machine's compute speed from those "
        "at RUN_DIR's link rate, the forward compute at --link-gbit from those at that rate",
    )
    p.add_argument("--json", metavar="FILE", help="write the prediction as JSON ('-': stdout)")
    p.add_argument(
        "--trace", type=Path, metavar="DIR", help="write the predicted timeline as a run directory"
    )
    p.add_argument(
        "--force", action="store_true", help="replace --trace if it holds an earlier prediction"
    )
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
            prefetch_depth=args.prefetch_depth,
        )
    except ValueError as e:
        flag = str(e).split()[0].replace("_", "-")
        raise UserError(f"--{flag}: {e}") from None


# (JSON field, what the table calls it, unit): the table prints ms and MiB.
ROWS = {
    "step_time_us": ("step time", "ms"),
    "exposed_comm_us": ("exposed comm", "ms"),
    "nccl_wait_us": ("NCCL wait", "ms"),
    "peak_mem_bytes": ("peak memory", "MiB"),
}


def _fmt(metric: str, v: float) -> str:
    unit = ROWS.get(metric, (metric, "ms"))[1]
    if unit == "MiB" and v == 0:
        return "n/a"  # the trace recorded no memory (torch traces without profile_memory)
    return f"{v / 2**20:,.1f} MiB" if unit == "MiB" else f"{v / 1e3:,.1f} ms"


def _check_outputs(args: argparse.Namespace) -> None:
    if args.json and args.json != "-":
        check_file(args.json, "--json")
    if args.trace is not None:
        check_dir(args.trace, "--trace")
        check_apart(args.trace, [args.run_dir], "--trace")


def _warn(message: str) -> None:
    """A loader warning (what was left out of a trace), worded and placed as analyze's."""
    print(f"warning: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    scenario = scenario_from_args(args)
    for d in [args.run_dir, *(args.contention_from or [])]:
        if not d.is_dir():
            raise UserError(
                f"{d}: not a directory; give a run written by overlapscope run or a torch "
                "FSDP trace directory"
            )
    _check_outputs(args)
    calib = load_calibration(args.run_dir, _warn)
    if args.trace is not None:
        check_writable(calib)
    pooled = _pool(args, calib, scenario) if args.contention_from else None
    pred = predict_from(
        calib,
        scenario,
        contention=pooled.contention if pooled else None,
        speed_scale=pooled.speed_scale if pooled else 1.0,
        forward_scale=pooled.forward_scale if pooled else 1.0,
    )
    if not math.isfinite(pred.step_time_us):
        raise UserError(f"{args.run_dir}: the replay produced no step time")
    doc = pred.to_json_dict()
    if args.trace is not None:
        doc["trace_dir"] = str(args.trace)
    text = json.dumps(doc, indent=1) + "\n"
    if args.trace is not None:
        write_predicted_run(pred, args.trace, force=args.force)
    if args.json == "-":
        sys.stdout.write(text)
        return 0
    if args.json:
        write_file(args.json, text, "--json")
    _print_report(pred, pooled, args.trace)
    return 0


def _print_report(pred: Prediction, pooled: Pooled | None, trace: Path | None) -> None:
    """The prediction as text: predicted vs measured per metric, then what qualifies it."""
    scenario = pred.scenario
    m = pred.calibration.measured
    print(
        f"what-if {scenario.label}  (measured: {m.scenario.label}, link {m.link_gbit or 'unshaped'})"
    )
    rows = [
        (ROWS.get(r.metric, (r.metric, ""))[0], _fmt(r.metric, r.measured_source),
         _fmt(r.metric, r.predicted))
        for r in pred.table().itertuples()
    ]  # fmt: skip
    w = [max(len(x[i]) for x in [("", "measured", "predicted"), *rows]) for i in range(3)]
    for name, a, b in [("", "measured", "predicted"), *rows]:
        print(f"  {name:{w[0]}}  {a:>{w[1]}}  {b:>{w[2]}}")
    print(f"  max alive units in backward: {pred.max_alive_in_backward}")
    _print_contention(pred, pooled)
    if pred.calibration.step_model.blocking:
        print(
            "  note: this torch run's collectives block their thread (CPU gloo), and the "
            "replay keeps that; prefetch hides communication only where they do not (GPU)"
        )
    _print_host_bound(pred.calibration)
    if trace is not None:
        print(f"predicted timeline: {trace}")


# A GPU run whose device idled more than this part of its step was set by its host.
HOST_BOUND_IDLE = 0.25


def _print_host_bound(calib: Calibration) -> None:
    """GPU runs whose host set the step: the prediction holds at that run's host speed."""
    m = calib.measured
    if calib.device is None or not m.idle_us > HOST_BOUND_IDLE * m.step_time_us:
        return
    print(
        f"  note: the device idled {100 * m.idle_us / m.step_time_us:.0f} % of the measured "
        "step: the host sets it, and the prediction holds at this run's host speed "
        "(prefetching hides only what the host has issued)"
    )


def _pool(args: argparse.Namespace, calib: Calibration, scenario: Scenario) -> Pooled:
    """α and the compute speed across ``--contention-from``'s runs at RUN_DIR's link rate, and
    the forward speed at the scenario's (overlapscope/sim/across.py); the runs used for
    neither are named in a warning."""
    link = calib.measured.link_gbit
    if calib.device is not None:
        check_gpu(calib, scenario, across=True)
    others = [load_calibration(d, _warn) for d in args.contention_from]
    for d, c in zip(args.contention_from, others, strict=True):
        if c.step_model.units != calib.step_model.units:
            raise UserError(
                f"--contention-from {d}: another workload (units {len(c.step_model.units)}, "
                f"not {len(calib.step_model.units)}): give runs of the same model"
            )
    rate = f"{link} Gbit/s" if link else "unshaped"
    pooled = pool_runs(calib, others, scenario)
    if pooled.num_runs == 1:
        raise UserError(
            f"--contention-from: no run at {args.run_dir}'s link rate ({rate}); give runs of "
            "the same workload at that rate"
        )
    if pooled.unused:
        apart = ", ".join(str(args.contention_from[i]) for i in pooled.unused)
        _warn(
            f"--contention-from: {len(pooled.unused)} run(s) at neither {rate} (the run's) nor "
            f"the scenario's rate and forward prefetch left out: {apart}"
        )
    return pooled


def _print_contention(pred: Prediction, pooled: Pooled | None) -> None:
    """The compute slow-down α: fitted across runs (when asked), and as replayed on the
    scenario's links (it follows the bytes moved per µs, overlapscope/sim/rescale.py); and
    the compute speed calibrated across runs."""
    fitted = pred.calibration.contention
    on_links = (
        f" ({pred.contention:.3f} on the scenario's link)" if pred.contention != fitted else ""
    )
    if pooled is not None:
        print(f"  contention fitted across {pooled.num_runs} runs: {fitted:.3f}{on_links}")
        if pooled.speed_runs:
            print(
                f"  compute speed: x{pooled.speed_scale:.3f} the run's own (the median forward "
                f"compute of {pooled.speed_runs} runs)"
            )
        if pooled.forward_runs:
            print(
                f"  forward compute at {pred.scenario.link_gbit} Gbit/s: "
                f"x{pooled.forward_scale:.3f} more (the median of {pooled.forward_runs} runs there)"
            )
    elif on_links:
        print(f"  contention: {fitted:.3f}{on_links}")
