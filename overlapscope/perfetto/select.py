"""What goes into the file: the steps and ranks chosen (``--steps``, ``--ranks``), and the
time windows of the chosen steps."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.errors import UserError


@dataclass(frozen=True, slots=True)
class Selection:
    """The steps and ranks to write (None: all). ``windows``: the time spans of the chosen
    steps on the aligned clock, sorted and disjoint (None: everything)."""

    steps: tuple[int, ...] | None = None
    ranks: tuple[int, ...] | None = None
    windows: tuple[tuple[float, float], ...] | None = None

    def has_rank(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    def has_step(self, step: int) -> bool:
        return self.steps is None or step in self.steps


def step_spans(steps: pd.DataFrame, path_steps: pd.DataFrame | None) -> pd.DataFrame:
    """Per step, from the earliest to the latest time any rank spends on it: the device's
    window (``steps``) and the step's span on the critical path (from the first rank's
    ProfilerStep start, host time included). Columns ``step, start_us, end_us``."""
    frames = [steps[["step", "start_us", "end_us"]]]
    if path_steps is not None and len(path_steps):
        frames.append(path_steps[["step", "start_us", "end_us"]])
    both = pd.concat(frames, ignore_index=True)
    both = both[both["step"] >= 0]
    g = both.groupby("step", sort=True)
    return pd.DataFrame(
        {"start_us": g["start_us"].min(), "end_us": g["end_us"].max()}
    ).reset_index()


def choose(
    spans: pd.DataFrame,
    ranks: list[int],
    steps: tuple[int, ...] | None,
    wanted_ranks: tuple[int, ...] | None,
) -> Selection:
    """The selection of ``--steps`` / ``--ranks`` among the run's steps and ranks; one line
    naming the flag and what there is when a chosen step or rank is not in the run."""
    if wanted_ranks is not None:
        absent = [r for r in wanted_ranks if r not in set(ranks)]
        if absent:
            raise UserError(
                f"--ranks: rank {absent[0]} is not in the run (its ranks: {_listing(ranks)})"
            )
    if steps is None:
        return Selection(None, wanted_ranks, None)
    known = [int(s) for s in spans["step"].tolist()]
    absent = [s for s in steps if s not in set(known)]
    if absent:
        raise UserError(
            f"--steps: step {absent[0]} is not in the run (its steps: {_listing(known)})"
        )
    rows = spans[spans["step"].isin(steps)]
    return Selection(steps, wanted_ranks, _merged(rows["start_us"], rows["end_us"]))


def _listing(values: list[int]) -> str:
    shown = ", ".join(str(v) for v in values[:12])
    return shown + (", ..." if len(values) > 12 else "")


def _merged(starts: pd.Series, ends: pd.Series) -> tuple[tuple[float, float], ...]:
    order = np.argsort(starts.to_numpy(), kind="stable")
    out: list[list[float]] = []
    for a, b in zip(starts.to_numpy()[order], ends.to_numpy()[order], strict=True):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], float(b))
        else:
            out.append([float(a), float(b)])
    return tuple((a, b) for a, b in out)


def overlaps(windows: tuple[tuple[float, float], ...] | None, ts: float, end: float) -> bool:
    """Whether ``[ts, end]`` overlaps one of ``windows`` (None: everything does): by more
    than a point, or, for an instant, lies in one."""
    if windows is None:
        return True
    if end > ts:
        return any(ts < b and end > a for a, b in windows)
    return any(a <= ts <= b for a, b in windows)
