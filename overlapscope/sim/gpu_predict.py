"""What a GPU run can predict, and its replay (``predict_from`` on a calibration with a
device model, ``sim/launches.py``).

Refused in one line (a :class:`~overlapscope.errors.UserError`, exit 2 from the CLI):

- another network from a world-size-1 run: its collectives are copies on one device (NCCL
  with one rank moves nothing, FSDP2's all-gather is in place); no link was measured;
- the rate limiter (``--limit-all-gathers``, or a run recorded with it): on CUDA it holds
  the host until a freed unit's last kernel is done, which the replay does not model;
- calibration across runs (``--contention-from``): it fits the CPU replay's compute
  slow-down and speed; a GPU run's kernels are replayed as they ran.
"""

from __future__ import annotations

from collections.abc import Callable

from overlapscope.errors import UserError
from overlapscope.phases import Phase
from overlapscope.sim.calibrate import Calibration
from overlapscope.sim.device_replay import DEVICE, HOST, NOTHING, DeviceScenario, device_replay
from overlapscope.sim.replay import Replay
from overlapscope.sim.schedule import Collective, Program, Scenario

# a collective's time on the scenario's link from its measured lane time and lag per step
TransferTime = Callable[
    [Collective, dict[tuple[str, Phase], float], dict[tuple[str, Phase], float]], float
]


def check_gpu(calib: Calibration, scenario: Scenario, *, across: bool = False) -> None:
    """Refuse what the GPU replay cannot predict (module docstring); ``across``: the caller
    calibrates across runs."""
    where = calib.source or "run"
    if across:
        raise UserError(
            f"--contention-from: {where} is a GPU run, whose kernels are replayed as they ran; "
            "calibrating across runs (compute slow-down, machine speed) is for CPU runs"
        )
    if calib.world_size == 1 and (scenario.link_gbit is not None or scenario.bandwidth_scale != 1):
        raise UserError(
            f"{where}: world size 1: its collectives are copies on one device and crossed no "
            "network, so --link-gbit / --bandwidth-scale cannot be predicted from it; record "
            "2 or more ranks"
        )
    limited = calib.measured.scenario.limit_all_gathers is not None
    if scenario.limit_all_gathers is not None or limited:
        raise UserError(
            f"{where}: {'recorded with ' if limited else ''}the rate limiter on a GPU: it holds "
            "the host until a freed unit's last kernel is done, which the GPU what-if does not "
            "model; predict "
            + (
                "from a run without --limit-all-gathers"
                if limited
                else "without --limit-all-gathers"
            )
        )


def where_moved(calib: Calibration, c: Collective) -> str:
    """Where a collective's transfer runs: as measured on the host (the engine's gloo on
    CUDA) or on the device; nowhere if the run moved nothing for it (torch FSDP2's in-place
    all-gather at world size 1)."""
    assert calib.device is not None
    if (c.unit, c.phase.value) in calib.device.host_transfers:
        return HOST
    return DEVICE if (c.unit, c.phase) in calib.transfer_us else NOTHING


def gpu_replays(calib: Calibration, program: Program, transfer: TransferTime) -> tuple[Replay, ...]:
    """The measured steps replayed back to back on host and device (sim/device_replay.py)."""
    assert calib.device is not None
    where = [where_moved(calib, c) for c in program.collectives]
    transfers = [
        [
            transfer(c, measured, lags) if where[c.index] != NOTHING else 0.0
            for c in program.collectives
        ]
        for measured, lags in zip(calib.step_transfer_us, calib.step_lag_us, strict=True)
    ]
    return device_replay(calib.device, DeviceScenario(program, transfers, where))
