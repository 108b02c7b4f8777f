"""Whether the traces given are the ranks of one run, checked once per load.

A trace that cannot be a rank of the same job as the others is *foreign*: the loader
refuses it in one line naming it (or, with ``--allow-missing-ranks``, leaves it out with a
warning, its rank then missing). In order:

1. **Run stamps** (traces ``overlapscope run`` wrote, :data:`~overlapscope.trace.naming.files.
   RUN_STAMP_KEY`): a listed file must carry the stamp ``run.json`` lists for it (its run
   id and rank); stamped files of two runs are never one run.
2. **Names** in an ``overlapscope run`` directory: ``rank-K`` must hold rank K (renamed
   files are a damaged run). Elsewhere a name that disagrees with ``distributedInfo`` is a
   warning (the rank comes from ``distributedInfo``).
3. **Steps**: ranks of one job profile the same steps; a rank whose step numbers share none
   with the others' was profiled in another window.
4. **Times** (wall clock: ``baseTimeNanoseconds`` + ts): the collectives keep one job's
   ranks within about a step of each other, so a step that starts on one rank more than two
   step lengths plus :data:`CLOCK_SLACK_NS` (hosts' clocks) from the others' was recorded by
   another job; without steps, the traces' spans must overlap within the slack.
5. **Collectives**: per (step, process group), every rank of one job issues the same
   collectives, so the same sequence numbers (torch's ``Seq``): ranges that do not overlap
   are another job's; a different count is a warning.

The majority decides who is foreign (ties: the group holding the lowest rank).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from overlapscope.errors import UserError
from overlapscope.manifest import RUN_JSON, RunManifest
from overlapscope.trace.naming.files import RUN_STAMP_KEY
from overlapscope.trace.read.parse import RawTrace
from overlapscope.trace.run.discover import ALLOW_FLAG
from overlapscope.trace.run.ranks import rank_from_name, rank_ranges

CLOCK_SLACK_NS = 2 * 10**9  # clocks of a job's hosts agree to well within this (NTP: ms)
SHOWN = 3  # ranks named in a warning before "..."


K = TypeVar("K")
Foreign = dict[int, str]  # index into the traces -> why it is not of this run


@dataclass(frozen=True, slots=True)
class Verdict:
    foreign: Foreign = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _rank(r: RawTrace) -> int:
    return int(r.rank or 0)


def _majority(groups: Mapping[K, list[int]], raws: Sequence[RawTrace]) -> K:
    """The key of the largest group of trace indices (ties: the one with the lowest rank)."""
    return min(groups, key=lambda k: (-len(groups[k]), min(_rank(raws[i]) for i in groups[k])))


def _listed(r: RawTrace, want: tuple[str, int]) -> str | None:
    """Why ``r`` is not the trace ``run.json`` lists under its name (None: it is)."""
    run_id, rank = want
    if r.stamp is None:
        return (
            f"carries no run stamp, but {RUN_JSON} lists it as rank {rank} of run "
            f"{run_id[:12]}: it was copied in from elsewhere; copy the run's own file back"
        )
    if r.stamp.run_id != run_id:
        return (
            f"is rank {r.stamp.rank} of run {r.stamp.run_id[:12]}, not of this run "
            f"({run_id[:12]}, {RUN_JSON}): it was copied in from another run; copy the run's "
            "own file back"
        )
    if r.stamp.rank != rank:
        return (
            f"holds rank {r.stamp.rank}, but {RUN_JSON} lists it as rank {rank}: the run's "
            "files were renamed; give them back their names"
        )
    return None


def _stamps(raws: Sequence[RawTrace], manifest: RunManifest | None) -> Foreign:
    """Check 1: stamps against run.json's listing, and one run id among the stamped."""
    listed = (
        dict(zip(manifest.traces, manifest.trace_stamps, strict=True))
        if manifest is not None and manifest.trace_stamps
        else {}
    )
    foreign: Foreign = {}
    for i, r in enumerate(raws):
        want = listed.get(r.path.name)
        if want is not None and (why := _listed(r, want)) is not None:
            foreign[i] = why
    runs: dict[str, list[int]] = {}
    for i, r in enumerate(raws):
        if r.stamp is not None and i not in foreign:
            runs.setdefault(r.stamp.run_id, []).append(i)
    if len(runs) > 1:
        keep = _majority(runs, raws)
        for run_id, members in runs.items():
            for i in members if run_id != keep else []:
                foreign[i] = (
                    f"is a trace of run {run_id[:12]}, the others of run {keep[:12]} "
                    f"({RUN_STAMP_KEY}): traces of two runs"
                )
    return foreign


def _names(raws: Sequence[RawTrace], idx: list[int], our_run: bool) -> Verdict:
    """Check 2: rank-K holds rank K in an overlapscope run; elsewhere a warning."""
    off = [(i, n) for i in idx if (n := rank_from_name(raws[i].path)) not in (None, raws[i].rank)]
    if our_run:
        return Verdict({i: (
            f"holds rank {raws[i].rank} (distributedInfo), but its name says rank {n}: the "
            "run's files were renamed; give them back their names"
        ) for i, n in off})  # fmt: skip
    if not off:
        return Verdict()
    shown = ", ".join(f"{raws[i].path.name} holds rank {raws[i].rank}" for i, _ in off[:SHOWN])
    more = f" and {len(off) - SHOWN} more" if len(off) > SHOWN else ""
    return Verdict(warnings=[
        f"file names disagree with the ranks in distributedInfo ({shown}{more}); ranks taken "
        "from distributedInfo"
    ])  # fmt: skip


def _spans(numbers: frozenset[int]) -> str:
    return rank_ranges(sorted(numbers)) or "none"


def _steps(raws: Sequence[RawTrace], idx: list[int]) -> Verdict:
    """Check 3: the profiled step numbers."""
    sets: dict[frozenset[int], list[int]] = {}
    for i in idx:
        sets.setdefault(frozenset(raws[i].fingerprint.steps), []).append(i)
    if len(sets) < 2:
        return Verdict()
    keep = _majority(sets, raws)
    ref = raws[sets[keep][0]].path.name
    out = Verdict()
    differ = []
    for steps, members in sets.items():
        for i in members if steps != keep else []:
            if steps and keep and not steps & keep:
                out.foreign[i] = (
                    f"recorded steps {_spans(steps)}, {ref} steps {_spans(keep)}: profiled in "
                    "another window, not in this job"
                )
            else:
                differ.append(f"{raws[i].path.name}: {_spans(steps)}")
    if differ:
        out.warnings.append(
            f"ranks recorded different steps ({', '.join(differ[:SHOWN])}; {ref} and "
            f"{len(sets[keep]) - 1} more: {_spans(keep)}); each rank's figures are of its own"
        )
    return out


def _duration(ns: float) -> str:
    """``5.0 h``, ``3.2 min``, ``11.1 s``, ``12.5 ms``, ``50 µs``."""
    for unit, size, fmt in (("h", 3.6e12, ".1f"), ("min", 6e10, ".1f"), ("s", 1e9, ".1f"),
                            ("ms", 1e6, ".1f")):  # fmt: skip
        if ns >= 2 * size or (unit in ("s", "ms") and ns >= size):
            return f"{ns / size:,{fmt}} {unit}"
    return f"{ns / 1e3:,.0f} µs"


def _clusters(values: list[tuple[int, int]], gap: float) -> list[list[int]]:
    """Trace indices grouped by value (``(value, index)``), split where two neighbours are
    more than ``gap`` apart."""
    out: list[list[int]] = []
    last = None
    for v, i in sorted(values):
        if last is None or v - last > gap:
            out.append([])
        out[-1].append(i)
        last = v
    return out


def _overlapping(spans: list[tuple[int, int, int]]) -> list[list[int]]:
    """Trace indices grouped by spans (``(start, end, index)``) that overlap within
    :data:`CLOCK_SLACK_NS`."""
    out: list[list[int]] = []
    reach = 0
    for start, end, i in sorted(spans):
        if not out or start > reach + CLOCK_SLACK_NS:
            out.append([])
        out[-1].append(i)
        reach = max(reach, end) if len(out[-1]) > 1 else end
    return out


def _times(raws: Sequence[RawTrace], idx: list[int]) -> Foreign:
    """Check 4: a common step starts at about the same wall-clock time on every rank (the
    traces' spans, where they have no step in common)."""
    fps = {i: raws[i].fingerprint for i in idx}
    if len(idx) < 2 or not all(fp.timed for fp in fps.values()):
        return {}
    counts = Counter(n for fp in fps.values() for n in fp.steps)
    step = min((n for n, c in counts.items() if c > 1), key=lambda n: (-counts[n], n), default=None)
    if step is not None:
        having = [i for i in idx if step in fps[i].steps]
        lengths = sorted(e - s for i in having for s, e in [fps[i].steps[step]])
        gap = 2 * lengths[len(lengths) // 2] + CLOCK_SLACK_NS
        groups = _clusters([(fps[i].steps[step][0], i) for i in having], gap)
        what = f"step {step} starts"
        at = {i: fps[i].steps[step][0] for i in having}
    else:  # no step in common: the spans must overlap (within the slack)
        groups = _overlapping([(*fps[i].span_ns, i) for i in idx])
        what, at = "its events start", {i: fps[i].span_ns[0] for i in idx}
        lengths = [0]
    if len(groups) < 2:
        return {}
    keep = _majority(dict(enumerate(groups)), raws)
    ref = groups[keep][0]
    length = lengths[len(lengths) // 2]
    return {
        i: (
            f"{what} {_duration(abs(at[i] - at[ref]))} "
            f"{'after' if at[i] > at[ref] else 'before'} {raws[ref].path.name}'s"
            + (f" (a step takes {_duration(length)})" if length else "")
            + ": recorded at another time, not in this job"
        )
        for g, members in enumerate(groups) if g != keep for i in members
    }  # fmt: skip


def _seq_clusters(ranges: list[tuple[int, int, int]]) -> list[list[int]]:
    """Trace indices grouped by overlapping Seq ranges (``(low, high, index)``)."""
    out: list[list[int]] = []
    reach = -1
    for low, high, i in sorted(ranges):
        if not out or low > reach:
            out.append([])
        out[-1].append(i)
        reach = max(reach, high)
    return out


def _collectives(raws: Sequence[RawTrace], idx: list[int]) -> Verdict:
    """Check 5: per (step, group), the same collectives on every rank: Seq ranges that do
    not overlap are another job's; a different count is a warning."""
    out = Verdict()
    keys = Counter(k for i in idx for k in raws[i].fingerprint.collectives)
    counted: list[str] = []
    for key in sorted((k for k, c in keys.items() if c > 1), key=str):
        have = {i: raws[i].fingerprint.collectives[key] for i in idx
                if key in raws[i].fingerprint.collectives and i not in out.foreign}  # fmt: skip
        groups = _seq_clusters([(lo, hi, i) for i, (_, lo, hi) in have.items() if lo >= 0])
        if len(groups) > 1:
            keep = _majority(dict(enumerate(groups)), raws)
            ref = groups[keep][0]
            for g, members in enumerate(groups):
                for i in members if g != keep else []:
                    out.foreign[i] = (
                        f"issued collectives {have[i][1]}-{have[i][2]} of group {key[1]} in step "
                        f"{key[0]}, {raws[ref].path.name} {have[ref][1]}-{have[ref][2]} (Seq): "
                        "another job's collectives"
                    )
        mode = Counter(n for n, _, _ in have.values()).most_common(1)[0][0]
        counted += [f"{raws[i].path.name}: {n} in step {key[0]} of group {key[1]}"
                    for i, (n, _, _) in have.items() if n != mode and i not in out.foreign]  # fmt: skip
    if counted:
        out.warnings.append(
            f"ranks issued different numbers of collectives ({', '.join(counted[:SHOWN])}"
            f"{' ...' if len(counted) > SHOWN else ''}; the others as many as most ranks): "
            "collectives are matched across ranks by their order, which may pair wrong ones"
        )
    return out


def check(raws: Sequence[RawTrace], manifest: RunManifest | None, our_run: bool) -> Verdict:
    """Which of ``raws`` (one per rank) cannot be ranks of the others' job, and why; and
    the warnings about those that can but disagree. ``manifest``: the run directory's
    ``run.json``; ``our_run``: the traces are an overlapscope run directory's."""
    out = Verdict(_stamps(raws, manifest))
    for step in (
        lambda idx: _names(raws, idx, our_run),
        lambda idx: _steps(raws, idx),
        lambda idx: Verdict(_times(raws, idx)),
        lambda idx: _collectives(raws, idx),
    ):
        found = step([i for i in range(len(raws)) if i not in out.foreign])
        out.foreign.update(found.foreign)
        out.warnings.extend(found.warnings)
    return out


def one_job(
    raws: Sequence[RawTrace],
    manifest: RunManifest | None,
    our_run: bool,
    strict: bool,
    warnings: list[str],
) -> list[int]:
    """The indices of ``raws`` that can be ranks of one job (:func:`check`): one that cannot
    stops the command in one line naming it, unless ``strict`` is off: then it is left out
    with a warning (its rank is then missing). Appends the check's warnings."""
    verdict = check(raws, manifest, our_run)
    warnings.extend(verdict.warnings)
    if verdict.foreign and (strict or len(verdict.foreign) == len(raws)):
        i, why = min(verdict.foreign.items())
        raise UserError(f"{raws[i].path}: {why}; or pass {ALLOW_FLAG} to analyse the other ranks")
    warnings.extend(f"left out {raws[i].path}: {why}" for i, why in verdict.foreign.items())
    return [i for i in range(len(raws)) if i not in verdict.foreign]
