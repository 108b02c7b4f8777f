"""The timeline of a run opened with ``--dask``: one step of a few ranks, read on demand.

Such a run's analysis holds every rank's summaries (overview, ranks, units, findings, the
critical path) but no event; its ``LoadedRun.timelines`` says where each rank's timeline
rows lie in the cache. For the timeline, :func:`step_view` reads the chosen step's rows of
the chosen ranks only (at most ``MAX_SHOWN_RANKS``; by default the ranks the step's critical
path runs through) and gives back the run as the timeline panel draws it, with those rows in
``analysis.timeline`` and the exposed intervals and critical-path links of those ranks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from dashboards.critical_path import GAP
from dashboards.data import LoadedRun
from overlapscope.analysis.api import RunAnalysis
from overlapscope.analysis.critical_path.path import CriticalPath
from overlapscope.errors import UserError

MAX_SHOWN_RANKS = 8
DEFAULT_SHOWN = 4  # the first ranks, where the step has no critical path
# The timeline columns the figure reads (dashboards/figures.py); the others are not read.
# The ranks picker's style (dashboards/layout.py): shown beside the step picker, or not.
PICKER_SHOWN = {"flex": "1", "minWidth": "220px"}
PICKER_HIDDEN = {"display": "none"}
VIEW_COLUMNS = ("rank", "step", "phase", "unit", "start_us", "end_us", "dur_us", "bytes")


@dataclass(frozen=True, slots=True)
class RankChoice:
    """The ranks a timeline panel shows, of ``num_ranks``; ``why``: how they were picked;
    ``left_out``: asked for beyond ``MAX_SHOWN_RANKS``; ``unknown``: asked for, not in the
    run; ``path_elsewhere``: ranks of the step's critical path not shown."""

    shown: tuple[int, ...]
    num_ranks: int
    why: str
    left_out: tuple[int, ...] = ()
    unknown: tuple[str, ...] = ()
    path_elsewhere: tuple[int, ...] = ()

    def title(self) -> str:
        return f" · ranks {_listed(self.shown)} ({len(self.shown)} of {self.num_ranks} shown)"

    def note(self, label: str, step: int) -> str:
        text = (
            f"{label} · step {step}: {len(self.shown)} of {self.num_ranks} ranks shown "
            f"({_listed(self.shown)}: {self.why}), this step's rows read from the --dask cache."
        )
        if self.left_out:
            text += f" At most {MAX_SHOWN_RANKS} at a time: not shown {_listed(self.left_out)}."
        if self.unknown:
            text += f" Not in this run: {', '.join(self.unknown)}."
        if self.path_elsewhere:
            text += f" The critical path also runs through ranks {_listed(self.path_elsewhere)}."
        return text


def _listed(ranks: Sequence[int], most: int = 2 * MAX_SHOWN_RANKS) -> str:
    more = f" and {len(ranks) - most} more" if len(ranks) > most else ""
    return ", ".join(str(r) for r in ranks[:most]) + more


def path_ranks(a: RunAnalysis, step: int) -> list[int]:
    """The ranks ``step``'s critical path runs through, most time on it first."""
    if a.path is None or a.path.links.empty:
        return []
    links = a.path.links[a.path.links["step"] == step]
    on_path = links.groupby("rank")["dur_us"].sum().sort_values(ascending=False, kind="stable")
    return [int(r) for r in on_path.index]


def choose_ranks(a: RunAnalysis, step: int, asked: object) -> RankChoice:
    """The ranks to show for ``step``: ``asked`` (the picker's value, from the browser:
    checked here) capped at ``MAX_SHOWN_RANKS``, else the step's critical-path ranks."""
    ranks = [int(r) for r in a.ranks["rank"]]
    known = set(ranks)
    values = list(asked) if isinstance(asked, list | tuple) else []
    ok = [isinstance(v, int) and not isinstance(v, bool) and v in known for v in values]
    valid = [v for v, good in zip(values, ok, strict=True) if good]
    unknown = tuple(str(v)[:20] for v, good in zip(values, ok, strict=True) if not good)
    on_path = path_ranks(a, step)
    if valid:
        picked, why = list(dict.fromkeys(valid)), "chosen"
    elif on_path:
        picked, why = on_path, "the ranks of its critical path; pick others under Ranks"
    else:
        picked, why = ranks[:DEFAULT_SHOWN], "the first ranks; pick others under Ranks"
    shown = tuple(sorted(picked[:MAX_SHOWN_RANKS]))
    return RankChoice(
        shown=shown,
        num_ranks=len(ranks),
        why=why,
        left_out=tuple(picked[MAX_SHOWN_RANKS:]) if valid else (),
        unknown=unknown,
        path_elsewhere=tuple(sorted(set(on_path) - set(shown))),
    )


def shown_path(path: CriticalPath | None, shown: Sequence[int]) -> CriticalPath | None:
    """The links on ``shown`` ranks, each marked ``gap_before`` where the path came from a
    rank not shown (the line is broken there, not drawn across)."""
    if path is None or path.links.empty:
        return path
    links = path.links
    on = links["rank"].isin(shown)
    same_step = links["step"].eq(links["step"].shift())
    gap = same_step & ~on.shift(fill_value=True).astype(bool)
    return CriticalPath(links[on].assign(**{GAP: gap[on]}), path.steps)


def chosen_step(a: RunAnalysis, step: int | None) -> int:
    """``step`` when the run profiled it, else its first profiled step."""
    available = sorted(int(s) for s in a.steps["step"].unique())
    if not available:
        raise UserError("no profiled steps")
    return step if step in available else available[0]


def step_view(run: LoadedRun, step: int | None, asked: object) -> tuple[LoadedRun, RankChoice]:
    """``run`` as its timeline panel draws it: the chosen step's rows of the chosen ranks,
    read from the cache (``run.timelines``), and their exposed intervals and path links."""
    assert run.timelines is not None
    a = run.analysis
    try:
        step_no = chosen_step(a, step)
    except UserError as e:
        raise UserError(f"{run.source.label}: {e}") from None  # as run_panel says it
    choice = choose_ranks(a, step_no, asked)
    rows = run.timelines.step_rows(step_no, choice.shown, VIEW_COLUMNS)
    view = dataclasses.replace(
        a,
        timeline=rows,
        exposed=a.exposed[a.exposed["rank"].isin(choice.shown)],
        path=shown_path(a.path, choice.shown),
    )
    return dataclasses.replace(run, analysis=view), choice


def rank_options(runs: Sequence[LoadedRun]) -> list[dict[str, object]]:
    """The ranks picker's options: every rank of the runs opened with ``--dask``."""
    ranks = sorted({int(r) for run in runs for r in run.analysis.ranks["rank"]})
    return [{"label": f"rank {r}", "value": r} for r in ranks]
