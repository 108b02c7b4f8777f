"""Write a predicted step as a run directory our loader, the analysis and Perfetto can read.

One Kineto-format trace per rank (``rank-K.pt.trace.json.gz``): on the training thread the
``ProfilerStep#N`` range and the ``ovs/<phase>/<unit>`` compute, issue and wait ranges; on
a communication thread one ``gloo:<op>`` per collective in issue order (sizes in ``Input
Dims`` so the loader recovers bytes), ``distributedInfo`` for the rank. ``run.json`` is the
measured run's, with the scenario's engine config and a ``predicted`` block marking it as a
prediction (step time, peak memory and alive units are the predicted ones).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from overlapscope.config import EngineConfig
from overlapscope.errors import UserError
from overlapscope.manifest import Predicted, RunManifest, read_manifest, write_manifest
from overlapscope.outputs import replace_dir
from overlapscope.phases import CollectiveKind
from overlapscope.sim.calibrate import Calibration
from overlapscope.sim.predict import Prediction
from overlapscope.trace.naming.files import trace_name
from overlapscope.trace.naming.ranges import format_range

MAIN_TID = 1
COMM_TID = 2
PID = 1
TS0_US = 1_000_000.0  # predicted time 0
FLOAT_BYTES = 4


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
                if c.kind == CollectiveKind.ALL_GATHER.value:
                    numel //= calib.world_size  # the input is the shard
                dims = {"Input type": ["float"], "Input Dims": [[numel]]}
                events.append(_event(f"gloo:{c.kind}", COMM_TID, start, end, **dims))
            elif iv.phase is not None:
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


def check_writable(calib: Calibration) -> None:
    """Only a CPU prediction is written as a trace (its training thread's ranges)."""
    if calib.device is not None:
        raise UserError(
            f"--trace: {calib.source or 'the run'} is a GPU run, and a GPU prediction (kernels "
            "on their streams, their launches) is not written as a trace; use --json, or the "
            "dashboard's What-if tab, which draws it"
        )


def _is_predicted_run(d: Path) -> bool:
    try:
        manifest = read_manifest(d)
    except UserError:
        return False
    return manifest is not None and manifest.predicted is not None


def write_predicted_run(pred: Prediction, out: Path | str, *, force: bool = False) -> Path:
    """Write ``out/rank-K.pt.trace.json.gz`` and ``out/run.json``; returns ``out``.

    The directory is built beside ``out`` and moved into place, so a failure leaves ``out``
    as it was. An existing ``out`` is replaced only with ``force`` and only if it is an
    earlier prediction; ``out`` may never be, hold or lie inside the measured run. A GPU
    prediction is refused: its kernels would be written as host ranges.
    """
    check_writable(pred.calibration)
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
    measured = calib.manifest or RunManifest()
    step = measured.profiled_steps[0] if measured.profiled_steps else 0
    ranks = sorted(pred.per_rank["rank"].astype(int))
    for r in ranks:
        with gzip.open(out / trace_name(r), "wt", compresslevel=6) as f:
            json.dump(rank_trace(pred, r, step), f)
    s = pred.scenario
    engine = dataclasses.replace(
        measured.engine or EngineConfig(),
        policy=s.policy,
        forward_prefetch=s.forward_prefetch,
        limit_all_gathers=s.limit_all_gathers,
    )
    link = s.link_gbit if s.link_gbit is not None else measured.link_gbit
    config = measured.config and dataclasses.replace(measured.config, engine=engine, link_gbit=link)
    per_rank = pred.per_rank.set_index("rank")
    write_manifest(out, dataclasses.replace(
        measured,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        config=config,
        engine=engine,
        link_gbit=link,
        profiled_steps=tuple(step + i for i in range(len(pred.replays))),
        traces=tuple(trace_name(r) for r in ranks),
        step_time_us=tuple(tuple(rep.step_time_us[r] for rep in pred.replays) for r in ranks),
        peak_mem_bytes=tuple(int(per_rank.loc[r, "peak_mem_bytes"]) for r in ranks),
        max_alive_units=(pred.max_alive_units,) * len(ranks),
        max_alive_in_backward=(pred.max_alive_in_backward,) * len(ranks),
        deferred_prefetches=(pred.deferred_prefetches,) * len(ranks),
        run_id=None,  # a prediction is not the measured run: its traces carry no run stamp
        trace_stamps=(),
        predicted=Predicted(
            source=str(Path(calib.source).resolve()) if calib.source else "",
            scenario=s.label,
            bandwidth_scale=s.bandwidth_scale,
            link_gbit=s.link_gbit,
            measured_config=calib.measured.scenario.label,
        ),
    ))  # fmt: skip
