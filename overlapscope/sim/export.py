"""Write a predicted step as a run directory our loader, the analysis and Perfetto can read.

One Kineto-format trace per rank (``rank-K.pt.trace.json.gz``): on the training thread the
``ProfilerStep#N`` range and the ``ovs/<phase>/<unit>`` compute, issue and wait ranges; on
a communication thread one ``gloo:<op>`` per collective in issue order (sizes in ``Input
Dims`` so the loader recovers bytes), ``distributedInfo`` for the rank. ``run.json`` is the
measured run's, with the scenario's engine config and a ``predicted`` block marking it as a
prediction (step time, peak memory and alive units are the predicted ones).
"""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from overlapscope.outputs import replace_dir
from overlapscope.sim.predict import Prediction
from overlapscope.trace.names import format_range

MAIN_TID = 1
COMM_TID = 2
PID = 1
TS0_US = 1_000_000.0  # predicted time 0
FLOAT_BYTES = 4


def trace_name(rank: int) -> str:
    return f"rank-{rank}.pt.trace.json.gz"


def _event(name: str, tid: int, start_us: float, end_us: float, **args: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": name,
        "pid": PID,
        "tid": tid,
        "ts": round(TS0_US + start_us, 3),
        "dur": round(max(end_us - start_us, 0.0), 3),
        "args": args,
    }


def rank_trace(pred: Prediction, rank: int, first_step: int) -> dict[str, Any]:
    """The Kineto document of one rank: one ``ProfilerStep`` per replayed step, back to back
    (each step starts on every rank when the slowest rank has finished the previous one)."""
    calib = pred.calibration
    events = []
    offset = 0.0
    for i, rep in enumerate(pred.replays):
        step_end = rep.step_time_us[rank]
        events.append(_event(f"ProfilerStep#{first_step + i}", MAIN_TID, offset, offset + step_end))
        for iv in sorted(
            (x for x in rep.intervals if x.rank == rank), key=lambda x: (x.start_us, x.end_us)
        ):
            start, end = offset + iv.start_us, offset + iv.end_us
            if iv.lane == "comm":
                c = rep.program.collectives[iv.collective]
                numel = c.bytes // FLOAT_BYTES
                if c.kind == "all_gather":
                    numel //= calib.world_size  # the input is the shard
                dims = {"Input type": ["float"], "Input Dims": [[numel]]}
                events.append(_event(f"gloo:{c.kind}", COMM_TID, start, end, **dims))
            else:
                events.append(_event(format_range(iv.phase, iv.unit), MAIN_TID, start, end))
        offset += max(rep.step_time_us.values())
    return {
        "schemaVersion": 1,
        "deviceProperties": [],
        "distributedInfo": {
            "backend": calib.backend or "gloo",
            "rank": rank,
            "world_size": calib.world_size,
        },
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 0,
        "traceName": f"overlapscope what-if {pred.scenario.label}",
        "traceEvents": events,
    }


def _is_predicted_run(d: Path) -> bool:
    try:
        return "predicted" in json.loads((d / "run.json").read_text())
    except (OSError, ValueError, TypeError):
        return False


def write_predicted_run(pred: Prediction, out: Path | str, *, force: bool = False) -> Path:
    """Write ``out/rank-K.pt.trace.json.gz`` and ``out/run.json``; returns ``out``.

    The directory is built beside ``out`` and moved into place, so a failure leaves ``out``
    as it was. An existing ``out`` is replaced only with ``force`` and only if it is an
    earlier prediction; ``out`` may never be, hold or lie inside the measured run.
    """
    return replace_dir(
        out,
        lambda tmp: _write_run(pred, tmp),
        flag="--trace",
        force=force,
        is_replaceable=_is_predicted_run,
        protect=[Path(pred.calibration.source)] if pred.calibration.source else [],
    )


def _write_run(pred: Prediction, out: Path) -> None:
    calib = pred.calibration
    meta = json.loads(json.dumps(calib.run_meta))  # deep copy
    profiled = meta.get("profiled_steps") or [0]
    step = int(profiled[0])
    ranks = sorted(pred.per_rank["rank"].astype(int))
    for r in ranks:
        with gzip.open(out / trace_name(r), "wt", compresslevel=6) as f:
            json.dump(rank_trace(pred, r, step), f)
    s = pred.scenario
    cfg = meta.setdefault("config", {})
    eng = cfg.setdefault("engine", {})
    eng.update(
        policy=s.policy.value,
        forward_prefetch=s.forward_prefetch,
        limit_all_gathers=s.limit_all_gathers,
    )
    if s.link_gbit is not None:
        cfg["link_gbit"] = s.link_gbit
    per_rank = pred.per_rank.set_index("rank")
    meta.update(
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        profiled_steps=[step + i for i in range(len(pred.replays))],
        traces=[trace_name(r) for r in ranks],
        step_time_us=[[rep.step_time_us[r] for rep in pred.replays] for r in ranks],
        peak_mem_bytes=[int(per_rank.loc[r, "peak_mem_bytes"]) for r in ranks],
        max_alive_units=[pred.max_alive_units] * len(ranks),
        max_alive_in_backward=[pred.max_alive_in_backward] * len(ranks),
        deferred_prefetches=[pred.deferred_prefetches] * len(ranks),
        predicted={
            "from": str(Path(calib.source).resolve()) if calib.source else "",
            "scenario": s.label,
            "bandwidth_scale": s.bandwidth_scale,
            "link_gbit": s.link_gbit,
            "measured_config": calib.measured.scenario.label,
        },
    )
    (out / "run.json").write_text(json.dumps(meta, indent=1) + "\n")
