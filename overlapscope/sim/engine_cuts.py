"""Where each op of the measured program ran on an engine rank's host (``ovs/`` ranges).

The engine names every op's range (``overlapscope/trace/naming/ranges.py``): compute
``ovs/<fwd|bwd|optim>/<unit>`` (the root's in pieces, in order), issue ``ovs/<ag_fwd|ag_bwd|rs>/
<unit>``, wait ``ovs/<phase>.wait/<unit>``. They come in the order of the measured program
(``sim/schedule.py``, the engine's own schedule); ranges no op of the program has
(recomputation, offload copies, the limiter) stay in the host time of the op after them,
and the waits among them (the limiter, the offload copies' wait) are blocked time. The
replay re-creates the offload copies' wait (the host waits for the device to drain); the
engine's limiter on CUDA (a wait for the oldest freed unit's last kernel) it does not.
"""

from __future__ import annotations

import pandas as pd

from overlapscope.analysis.intervals import Intervals, union
from overlapscope.errors import UserError
from overlapscope.phases import COPY_PHASES, Lane, Phase
from overlapscope.sim.launches import Cut, OpKey, StepWindow, op_key
from overlapscope.sim.schedule import OpKind, Program
from overlapscope.trace.naming.ranges import parse_range

PROGRAM_COMPUTE = (Phase.FWD, Phase.BWD, Phase.OPTIM)
# the host waits on the copy stream, which runs after what it was given: the device drains
COPY_WAITS = tuple(p.wait for p in COPY_PHASES)


def _kind(phase: Phase) -> OpKind | None:
    """The program op a range of this phase is (None: a range no program op has)."""
    if phase in PROGRAM_COMPUTE:
        return OpKind.COMPUTE
    if phase.lane is Lane.ISSUE:
        return OpKind.ISSUE
    if phase.lane is Lane.WAIT and phase is not Phase.LIMITER:
        awaited = phase.awaited
        return OpKind.WAIT if awaited is not None and awaited.lane is Lane.ISSUE else None
    return None


def _ranges(host: pd.DataFrame, win: StepWindow) -> pd.DataFrame:
    names = host["name"].astype(str)
    rows = host[
        names.str.startswith("ovs/")
        & (host["ts_us"] >= win.start_us)
        & (host["ts_us"] < win.sync_start_us)
    ].sort_values("ts_us")
    parsed = [parse_range(n) for n in rows["name"].astype(str)]
    return rows.assign(
        rphase=[p.phase if p else None for p in parsed], runit=[p.unit if p else "" for p in parsed]
    )[[p is not None for p in parsed]]


def engine_cuts(
    host: pd.DataFrame,
    win: StepWindow,
    program: Program,
    transfer_end_us: dict[tuple[str, str], float],
) -> tuple[list[Cut], Intervals, tuple[float, ...]]:
    """The measured program's ops on one rank-step's host, its blocked time, and where it
    waited for the device to drain (the offload copies' wait). ``transfer_end_us``: per
    (unit, phase) the end of the step's collectives that ran on the host (a wait on one
    blocks until it is done)."""
    ranges = _ranges(host, win)
    want = [op_key(op) for op in program.ops]
    cuts: list[Cut] = []
    blocked_s: list[float] = []
    blocked_e: list[float] = []
    drains: list[float] = []
    for row in ranges.itertuples():
        phase: Phase = row.rphase
        kind = _kind(phase)
        if kind is None:
            if phase.lane is Lane.WAIT:
                blocked_s.append(row.ts_us)
                blocked_e.append(row.end_us)
                if phase in COPY_WAITS:
                    drains.append(float(row.ts_us))
            continue
        i = len(cuts)
        this = (kind.value, phase.value, row.runit)
        if cuts and cuts[-1].key[:3] == this and (i >= len(want) or want[i][:3] != this):
            # a unit's op in two ranges (a checkpointed unit's backward around its
            # recomputation): one op, from the first range's start to the last one's end
            cuts[-1] = Cut(cuts[-1].key, cuts[-1].start_us, float(row.end_us))
            continue
        if i >= len(want) or want[i][:3] != this:
            expected = "/".join(want[i][1:3]) if i < len(want) else "nothing more"
            raise UserError(
                f"step {win.step}: the host's range {row.name} is not the measured schedule's "
                f"next op ({expected}): the engine's ranges do not follow its schedule"
            )
        block_at = float("nan")
        if kind is OpKind.WAIT:
            done = transfer_end_us.get((row.runit, phase.awaited.value if phase.awaited else ""))
            if done is not None and done > row.ts_us:
                block_at = float(row.ts_us)
                blocked_s.append(row.ts_us)
                blocked_e.append(min(done, row.end_us))
        cuts.append(Cut(want[i], float(row.ts_us), float(row.end_us), block_at))
    if len(cuts) != len(want):
        missing: OpKey = want[len(cuts)]
        raise UserError(
            f"step {win.step}: no host range for {missing[1]}/{missing[2]}: the engine's "
            "ranges do not follow its schedule (recorded with --no-instrument?)"
        )
    blocked_s.append(win.sync_start_us)
    blocked_e.append(win.sync_end_us)
    return cuts, union(blocked_s, blocked_e), tuple(drains)
