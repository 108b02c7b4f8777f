"""The GPU what-if on the recorded GPU fixtures (traces/gpu-*): every configuration of each
group predicted from every other, and every fixture replayed under its own (docs/WHATIF.md,
"GPU runs").

    python benchmarks/whatif_gpu_fixtures.py [--traces DIR] [--json FILE]

The fixtures are fixed files, so the table is deterministic. Per row: the predicted step
time and exposed communication against the target's measured ones, and how fast the
target's host issued forward compared with the source's (forward runs the same ops under
every backward policy: a ratio away from 1 is the machine, which a prediction from the
source cannot know; where the host sets the step it is the error's floor).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from overlapscope.sim import Calibration, load_calibration, predict_from
from overlapscope.sim.launches import OpKey

GROUPS = {
    "engine b32 (device-bound)": ["gpu-engine-nccl-b32-none", "gpu-engine-nccl-b32-backward_pre"],
    "engine b8 (host-bound)": ["gpu-engine-nccl-none", "gpu-engine-nccl-backward_pre"],
    "engine gloo 2 ranks, 5 Gbit/s": ["gpu-engine-gloo2-none", "gpu-engine-gloo2-backward_pre"],
    "FSDP1 b64": [
        "gpu-torch-fsdp1-none",
        "gpu-torch-fsdp1-backward-pre",
        "gpu-torch-fsdp1-forward-prefetch",
    ],
    "FSDP2 b64": [
        "gpu-torch-fsdp2-default",
        "gpu-torch-fsdp2-noprefetch",
        "gpu-torch-fsdp2-explicit",
    ],
    "b16 (host-bound)": ["gpu-torch-fsdp1-backward-pre-b16", "gpu-torch-fsdp2-default-b16"],
    "engine offload + checkpointing": ["gpu-engine-offload"],
}
# one configuration of each: self-replay only
SELF_ONLY = {"b16 (host-bound)", "engine offload + checkpointing"}


def host_forward_us(calib: Calibration) -> float:
    """The host's work per step on forward ops (mean over steps and ranks)."""
    assert calib.device is not None
    per = [
        sum(seg.work_us for key, seg in hs.ops.items() if _forward(key))
        for steps in calib.device.steps
        for hs in steps.values()
    ]
    return statistics.mean(per)


def _forward(key: OpKey) -> bool:
    return key[1] in ("fwd", "ag_fwd", "ag_fwd.wait")


def row(group: str, src: str, tgt: str, calibs: dict[str, Calibration]) -> dict[str, Any]:
    s, t = calibs[src], calibs[tgt]
    p = predict_from(s, t.measured.scenario)
    m = t.measured
    return {
        "group": group,
        "source": src,
        "target": tgt,
        "scenario": t.measured.scenario.label,
        "predicted_step_us": p.step_time_us,
        "measured_step_us": m.step_time_us,
        "step_error_pct": 100 * (p.step_time_us - m.step_time_us) / m.step_time_us,
        "predicted_exposed_comm_us": p.exposed_comm_us,
        "measured_exposed_comm_us": m.exposed_comm_us,
        "exposed_comm_error_us": p.exposed_comm_us - m.exposed_comm_us,
        "host_forward_ratio": host_forward_us(t) / host_forward_us(s),
        # engine runs only (run.json; torch traces record no peak): the one-window model
        "predicted_peak_mem_bytes": p.peak_mem_bytes if m.peak_mem_bytes else None,
        "measured_peak_mem_bytes": m.peak_mem_bytes or None,
    }


def _short(name: str) -> str:
    return name.removeprefix("gpu-").removeprefix("engine-").removeprefix("torch-")


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| group | source | target (scenario) | step: predicted / measured | error | "
        "exposed comm: predicted / measured | host fwd, target / source |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['group']} | `{_short(r['source'])}` | `{_short(r['target'])}` "
            f"(`{r['scenario']}`) | {r['predicted_step_us'] / 1e3:,.1f} / "
            f"{r['measured_step_us'] / 1e3:,.1f} ms | {r['step_error_pct']:+.1f} % | "
            f"{r['predicted_exposed_comm_us'] / 1e3:,.1f} / "
            f"{r['measured_exposed_comm_us'] / 1e3:,.1f} ms | {r['host_forward_ratio']:.2f} |"
        )
    return "\n".join(out)


def summary(rows: list[dict[str, Any]]) -> str:
    def stats(sel: list[dict[str, Any]]) -> str:
        e = [abs(r["step_error_pct"]) for r in sel]
        return f"{statistics.median(e):.1f} % median, {max(e):.1f} % worst ({len(e)})"

    own = [r for r in rows if r["source"] == r["target"]]
    cross = [r for r in rows if r["source"] != r["target"]]
    host = [r for r in cross if "host-bound" in r["group"]]
    device = [r for r in cross if "host-bound" not in r["group"]]
    return (
        f"Step time, |error|: self-replay {stats(own)}; another configuration where the "
        f"device or the link sets the step {stats(device)}; where the host sets it "
        f"{stats(host) if host else 'none'}."
    )


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=Path("traces"))
    ap.add_argument("--json", type=Path, help="also write every row as JSON")
    args = ap.parse_args(argv)
    names = [n for g in GROUPS.values() for n in g]
    calibs = {n: load_calibration(args.traces / n) for n in names}
    rows = []
    for group, runs in GROUPS.items():
        for src in runs:
            for tgt in [src] if group in SELF_ONLY else runs:
                rows.append(row(group, src, tgt, calibs))
    print(table(rows))
    print()
    print(summary(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
