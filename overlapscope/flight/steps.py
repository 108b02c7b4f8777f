"""Steps and units of the matched collectives, from the dumps alone or from a profiler
trace of the same steps beside them.

From the dumps alone: a step begins at a forward all-gather that follows anything else
(FSDP1, FSDP2 and the engine all start a step by gathering its first unit); within a step,
``slot`` numbers the collectives of each phase in issue order (the k-th forward all-gather
of a step is the k-th unit in forward order, every step alike). A dump without frames
(torch's JSON) has no phases, so no steps: they stay null.

With a profiler trace: the trace's collectives of its busiest group, in order, are laid
on the dumps' collectives of their busiest group at the shift where the phases agree and
the gaps between consecutive collectives agree best (gaps need no common clock). Matched
collectives take the trace's unit and step; where no shift agrees, nothing is joined.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from overlapscope.phases import Phase

# the largest median misfit of the gaps, µs, for a join to be kept
MAX_GAP_MISFIT_US = 2_000.0


def steps_and_slots(coll: pd.DataFrame) -> pd.DataFrame:
    """``coll`` with ``step`` and ``slot`` (nullable ints; per group, non-p2p)."""
    out = coll.sort_values(["pg", "is_p2p", "seq_id"], kind="stable").copy()
    step = pd.Series(pd.NA, index=out.index, dtype="Int64")
    slot = pd.Series(pd.NA, index=out.index, dtype="Int64")
    for _, g in out[~out["is_p2p"]].groupby("pg", sort=False):
        phase = g["phase"].to_numpy(object)
        fwd = phase == Phase.AG_FWD.value
        begins = fwd & ~np.r_[False, fwd[:-1]]
        n = np.cumsum(begins) - 1
        known = (n >= 0) & pd.notna(phase)
        s = pd.Series(np.where(known, n, -1), index=g.index)
        step[g.index[known]] = s[known]
        sub = g[known].assign(step=s[known])
        slot[sub.index] = sub.groupby(["step", "phase"]).cumcount()
    return out.assign(step=step, slot=slot).sort_index()


def _busiest(df: pd.DataFrame, col: str) -> object:
    return df[col].value_counts().idxmax() if len(df) else None


def join_trace(coll: pd.DataFrame, trace: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """``coll`` with ``unit``, ``trace_step`` and ``trace_seq`` from the trace's
    ``collectives`` table (analysis/collectives/tables.py); nulls where not joined; one sentence."""
    coll = coll.assign(unit=None, trace_step=pd.NA, trace_seq=pd.NA)
    if trace is None or trace.empty:
        return coll, "no profiler trace beside the dumps: units unknown"
    tgroup = _busiest(trace, "group")
    t = trace[trace["group"] == tgroup].sort_values(["step", "start_us", "seq"])
    fpg = _busiest(coll[~coll["is_p2p"]], "pg")
    f = coll[(coll["pg"] == fpg) & ~coll["is_p2p"]].sort_values("seq_id")
    shift = _best_shift(f, t)
    if shift is None:
        return coll, (f"profiler trace beside the dumps, but its {len(t)} collectives of group "
                      f"{tgroup} fit no run of the dumps' group {fpg}: units unknown")  # fmt: skip
    at = f.index[shift : shift + len(t)]
    coll.loc[at, "unit"] = t["unit"].astype(object).to_numpy()
    coll.loc[at, "trace_step"] = t["step"].to_numpy()
    coll.loc[at, "trace_seq"] = t["seq"].to_numpy()
    seq0 = int(f.loc[at[0], "seq_id"])
    coll, n_slot = _by_slot(coll)
    return coll, (f"joined to the profiler trace: its {len(t)} collectives of group {tgroup} "
                  f"are the dumps' group {fpg} from seq {seq0} (by phase and the gaps "
                  f"between collectives); {n_slot} more outside the trace's steps take the "
                  "unit of their slot")  # fmt: skip


def _by_slot(coll: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The unit of collectives outside the trace's steps, where every joined collective of
    the same group, phase and slot has one unit (the k-th forward all-gather of a step is
    the same unit in every step); how many were filled."""
    key = ["pg", "phase", "slot"]
    known = coll[coll["unit"].notna() & coll["slot"].notna()]
    units = known.groupby(key)["unit"].agg(lambda u: u.iloc[0] if u.nunique() == 1 else None)
    fill = coll["unit"].isna() & coll["slot"].notna() & coll["phase"].notna()
    idx = pd.MultiIndex.from_frame(coll.loc[fill, key].astype(object))
    got = units.reindex(idx).to_numpy(object)
    coll.loc[fill, "unit"] = got
    return coll, int(pd.notna(got).sum())


def _best_shift(f: pd.DataFrame, t: pd.DataFrame) -> int | None:
    n, m = len(f), len(t)
    if m == 0 or m > n:
        return None
    fp = f["phase"].to_numpy(object)
    tp = t["phase"].astype(object).to_numpy()
    fx = f["first_issue_us"].to_numpy(np.float64)
    tx = t["start_us"].to_numpy(np.float64)
    tgap = np.diff(tx)
    best, best_misfit = None, np.inf
    for k in range(n - m + 1):
        both = pd.notna(fp[k : k + m]) & pd.notna(tp)
        if (fp[k : k + m][both] != tp[both]).any():
            continue
        misfit = float(np.median(np.abs(np.diff(fx[k : k + m]) - tgap))) if m > 1 else 0.0
        if misfit < best_misfit:
            best, best_misfit = k, misfit
    return best if best_misfit <= MAX_GAP_MISFIT_US else None
