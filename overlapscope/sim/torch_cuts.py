"""Where each op of the measured program ran on a torch FSDP rank's host (GPU traces).

torch FSDP names no compute range; its collectives are the host's ``c10d::`` calls, one per
collective in issue order, even where the device shows nothing of them (FSDP2's all-gather
at world size 1 is in place). :func:`torch_collectives` labels each call with its phase and
unit (the GPU transfer it launched, else the FSDP range holding it: FSDP2's
``FSDP::all_gather (<fqn>)``) and :func:`torch_cuts` places the program's ops:

- ``ISSUE k``: the innermost labelled FSDP range holding call k (FSDP2's all-gather with its
  copy-in, FSDP1's prefetch hooks), or the call itself where that range holds another call;
- ``WAIT k``: where the next op begins (torch waits on the device: the compute stream waits
  on the collective's stream; the host does not block);
- the compute ops between two issues divide that host time where the next one's first
  kernel is launched (a unit's kernels carry its phase and unit, by the analysis' hook
  regions; the root's and the optimizer's carry none); two root ops in a row divide where
  autograd's backward begins, or the optimizer's step.

The rate limiter (FSDP1's ``rate_limiter``) is blocked time, as is the step's closing
synchronisation.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from overlapscope.analysis.intervals import Intervals, union
from overlapscope.errors import UserError
from overlapscope.sim.launches import Cut, StepWindow, op_key
from overlapscope.sim.schedule import Op, OpKind, Program
from overlapscope.sim.torch_fsdp import AUTOGRAD_NODE
from overlapscope.trace.naming.ranges import OPTIM_UNIT, ROOT_UNIT

OPTIMIZER_STEP = "Optimizer.step"
CALL_KINDS = {"allgather": "all_gather", "reduce_scatter": "reduce_scatter", "allreduce": "all_reduce"}  # fmt: skip
CALL_COLUMNS = ["rank", "step", "seq", "phase", "unit", "kind", "bytes", "ts_us", "end_us", "issue_start_us", "issue_end_us"]  # fmt: skip


def _kind(name: str) -> str | None:
    if not name.startswith("c10d::"):
        return None
    flat = name.replace("_", "").lower()
    return next((v for k, v in CALL_KINDS.items() if k.replace("_", "") in flat), None)


def _issue_range(call: pd.Series, labelled: pd.DataFrame, calls: pd.DataFrame) -> tuple[float, float]:  # fmt: skip
    """The innermost labelled FSDP range holding the call and no other call; else the call."""
    holds = labelled[(labelled["ts_us"] <= call["ts_us"]) & (labelled["end_us"] >= call["end_us"])]
    if len(holds):
        inner = holds.loc[holds["dur_us"].idxmin()]
        inside = calls[(calls["ts_us"] >= inner["ts_us"]) & (calls["end_us"] <= inner["end_us"])]
        if len(inside) == 1:
            return float(inner["ts_us"]), float(inner["end_us"])
    return float(call["ts_us"]), float(call["end_us"])


def _label(call: pd.Series, comm: pd.DataFrame, labelled: pd.DataFrame) -> tuple[str, str, int]:
    """(phase, unit, bytes) of a call: its GPU transfer's, else its labelled range's."""
    mine = comm[(comm["launch_us"] >= call["ts_us"]) & (comm["launch_us"] <= call["end_us"])]
    if len(mine):
        row = mine.iloc[0]
        return str(row["phase"]), str(row["unit"]), int(row.get("bytes", -1))
    holds = labelled[(labelled["ts_us"] <= call["ts_us"]) & (labelled["end_us"] >= call["end_us"])]
    holds = holds[holds["unit"].notna()]
    if holds.empty:
        return "", "", -1
    row = holds.loc[holds["dur_us"].idxmin()]
    return str(row["phase"]), str(row["unit"]), -1


def torch_collectives(host: pd.DataFrame, gpu: pd.DataFrame) -> pd.DataFrame:
    """Every rank-step's collective calls in issue order, labelled (``CALL_COLUMNS``)."""
    names = host["name"].astype(str)
    kinds = names.map(_kind)
    calls = host[kinds.notna() & (host["step"] >= 0)].assign(kind=kinds)
    labelled = host[(host["lane"] == "issue") & host["phase"].notna()]
    comm = gpu[gpu["lane"] == "comm"]
    rows = []
    for (r, s), cs in calls.sort_values("ts_us").groupby(["rank", "step"], sort=True):
        lab = labelled[(labelled["rank"] == r) & (labelled["step"] == s)]
        cm = comm[(comm["rank"] == r) & (comm["step"] == s)]
        for seq, (_, call) in enumerate(cs.iterrows()):
            phase, unit, nbytes = _label(call, cm, lab)
            lo, hi = _issue_range(call, lab, cs)
            rows.append((r, s, seq, phase, unit, call["kind"], nbytes, call["ts_us"], call["end_us"], lo, hi))  # fmt: skip
    out = pd.DataFrame(rows, columns=CALL_COLUMNS)
    if (out["unit"] == "").any():
        raise UserError(
            "a collective call with no FSDP unit: the trace's FSDP ranges do not name every "
            "collective (record with torch's FSDP1/FSDP2 and record_shapes=True)"
        )
    return out


def measured_places(calls: pd.DataFrame, gpu: pd.DataFrame) -> list[int]:
    """Per collective call of the first step's first rank, in order: how many units' compute
    the host had begun (launched a kernel of) before it (``issue_places``' measure)."""
    first = calls[(calls["step"] == calls["step"].min()) & (calls["rank"] == calls["rank"].min())]
    g = gpu[(gpu["rank"] == first["rank"].min()) & (gpu["step"] == first["step"].min())]
    g = g[(g["lane"] == "compute") & g["phase"].isin(["fwd", "bwd"]) & g["unit"].notna()]
    g = g[~g["unit"].isin([ROOT_UNIT, OPTIM_UNIT])]
    begun = np.sort(g.groupby(["phase", "unit"], observed=True)["launch_us"].min().to_numpy())
    starts = first.sort_values("seq")["ts_us"].to_numpy()
    return [int(n) for n in np.searchsorted(begun, starts, side="left")]


def _is_unit(op: Op) -> bool:
    return op.unit not in (ROOT_UNIT, OPTIM_UNIT)


def _boundary(prev: Op, nxt: Op, launches: pd.DataFrame, host: pd.DataFrame, cursor: float) -> float:  # fmt: skip
    """Where ``prev``'s host time ends and ``nxt``'s begins within one gap."""
    if _is_unit(nxt):
        own = launches[(launches["phase"] == nxt.phase.value) & (launches["unit"] == nxt.unit)]
        return float(own["launch_us"].min()) if len(own) else cursor
    if _is_unit(prev):
        own = launches[(launches["phase"] == prev.phase.value) & (launches["unit"] == prev.unit)]
        return float(own["launch_us"].max()) if len(own) else cursor
    names = host["name"].astype(str)
    after = host[host["ts_us"] >= cursor]
    marker = AUTOGRAD_NODE if nxt.phase.value == "bwd" else OPTIMIZER_STEP
    hits = after[names[after.index].str.startswith(marker)]
    return float(hits["ts_us"].min()) if len(hits) else cursor


class _Placer:
    """Places the program's ops on the host, gap by gap (the host time between two issues)."""

    def __init__(self, host: pd.DataFrame, gpu: pd.DataFrame, start_us: float) -> None:
        self.host, self.gpu, self.cursor = host, gpu, start_us
        self.cuts: list[Cut] = []
        self.pending: list[Op] = []  # the gap's compute and wait ops, in order

    def flush(self, until: float) -> None:
        """Divide the gap up to ``until`` among the pending ops."""
        computes = [op for op in self.pending if op.kind is OpKind.COMPUTE]
        for op in self.pending:
            if op.kind is not OpKind.COMPUTE:  # a wait: where the next op begins
                self.cuts.append(Cut(op_key(op), self.cursor, self.cursor))
                continue
            i = computes.index(op)
            end = until
            if i + 1 < len(computes):
                gap = self.gpu[(self.gpu["launch_us"] >= self.cursor) & (self.gpu["launch_us"] < until)]  # fmt: skip
                end = _boundary(op, computes[i + 1], gap, self.host, self.cursor)
            end = min(max(end, self.cursor), until)
            self.cuts.append(Cut(op_key(op), self.cursor, end))
            self.cursor = end
        self.cursor = max(self.cursor, until) if computes else self.cursor
        self.pending.clear()

    def issue(self, op: Op, lo: float, hi: float) -> None:
        self.flush(max(lo, self.cursor))
        hi = max(hi, self.cursor)
        self.cuts.append(Cut(op_key(op), self.cursor, hi))
        self.cursor = hi


def torch_cuts(
    host: pd.DataFrame, gpu: pd.DataFrame, calls: pd.DataFrame, win: StepWindow, program: Program
) -> tuple[list[Cut], Intervals, tuple[float, ...]]:
    """The measured program's ops on one rank-step's host (``calls``: its collective calls,
    :func:`torch_collectives`), its blocked time, and (none) where it drained the device."""
    calls = calls.sort_values("seq")
    measured = list(zip(calls["phase"], calls["unit"], strict=True))
    wanted = [(c.phase.value, c.unit) for c in program.collectives]
    if measured != wanted:
        raise UserError(
            f"step {win.step}: the collectives come in another order than the first step's "
            "(the schedule found from it): what-if needs every step to run the same schedule"
        )
    place = _Placer(host, gpu, win.start_us)
    for op in program.ops:
        if op.kind is OpKind.ISSUE:
            k = op.collective
            place.issue(op, calls["issue_start_us"].iat[k], calls["issue_end_us"].iat[k])
        else:
            place.pending.append(op)
    place.flush(max(win.sync_start_us, place.cursor))
    waits = host[(host["lane"] == "wait") & (host["ts_us"] >= win.start_us) & (host["ts_us"] < win.sync_start_us)]  # fmt: skip
    starts = np.append(waits["ts_us"].to_numpy(), win.sync_start_us)
    ends = np.append(waits["end_us"].to_numpy(), win.sync_end_us)
    return place.cuts, union(starts, ends), ()


def root_alias(calls: pd.DataFrame) -> str | None:
    """The unit that is FSDP's root under another name (FSDP1 numbers its units: the root is
    ``unit0``): the first unit gathered in forward, if it is never gathered again in
    backward while other units are (the root keeps its parameters from forward through
    backward, as FSDP2's root and the engine's do). None: no such unit, or it is ``root``."""
    first = calls[calls["step"] == calls["step"].min()].sort_values("seq")
    fwd = first.loc[first["phase"] == "ag_fwd", "unit"]
    bwd = set(first.loc[first["phase"] == "ag_bwd", "unit"])
    if fwd.empty or fwd.iloc[0] == ROOT_UNIT or not bwd or fwd.iloc[0] in bwd:
        return None
    return str(fwd.iloc[0])


def as_root(rows: pd.DataFrame, alias: str | None) -> pd.DataFrame:
    """``rows`` with the root's other name (:func:`root_alias`) replaced by ``root``."""
    if alias is None or rows.empty:
        return rows
    unit = rows["unit"].astype(object).where(rows["unit"].astype(object) != alias, ROOT_UNIT)
    return rows.assign(unit=unit)
