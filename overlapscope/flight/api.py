"""``analyze_dumps``: Flight Recorder dumps in, the flight report out (tables, clocks,
findings). No file is written here; the commands print and write it."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from overlapscope.analysis.findings import Finding
from overlapscope.errors import UserError
from overlapscope.flight.clocks import FlightClocks, estimate, row_offsets
from overlapscope.flight.findings import flight_findings
from overlapscope.flight.match import match, with_key
from overlapscope.flight.reader import Dump, read_dump
from overlapscope.flight.steps import join_trace, steps_and_slots
from overlapscope.flight.table import concat_entries, entries_table

JSON_VERSION = 1


@dataclass(frozen=True, slots=True)
class FlightReport:
    """``collectives``: one row per collective across ranks (match.py, steps.py);
    ``ranks``: one per collective and rank; ``entries``: every entry as read (table.py)."""

    dumps: tuple[Path, ...]
    entries: pd.DataFrame
    collectives: pd.DataFrame
    ranks: pd.DataFrame
    clocks: FlightClocks
    join_note: str
    findings: tuple[Finding, ...]
    warnings: tuple[str, ...]

    def tables(self) -> dict[str, pd.DataFrame]:
        return {
            "flight_collectives": self.collectives,
            "flight_ranks": self.ranks,
            "flight_clocks": self.clocks.offsets,
        }

    def to_json_dict(self) -> dict[str, Any]:
        def records(df: pd.DataFrame) -> list[dict[str, Any]]:
            clean = df.astype(object).where(df.notna(), None)
            return clean.to_dict(orient="records")

        return {
            "flight_version": JSON_VERSION,
            "dumps": [str(p) for p in self.dumps],
            "num_entries": len(self.entries),
            "clocks": {
                "basis": self.clocks.basis,
                "note": self.clocks.note,
                "offsets": records(self.clocks.offsets),
            },
            "join": self.join_note,
            "collectives": records(self.collectives),
            "findings": [f.to_dict() for f in self.findings],
            "warnings": list(self.warnings),
        }


def _pg_ranks(dumps: Sequence[Dump]) -> dict[str, tuple[int, ...]]:
    """Each group's ranks from ``pg_config`` (torch writes them as text: ``'[0, 1]'``)."""
    out: dict[str, tuple[int, ...]] = {}
    for d in dumps:
        for name, cfg in d.pg_config.items():
            try:
                ranks = ast.literal_eval(str(cfg.get("ranks", "[]")))
            except (ValueError, SyntaxError):
                continue
            if isinstance(ranks, list) and ranks and all(isinstance(r, int) for r in ranks):
                out.setdefault(str(name), tuple(ranks))
    return out


def _read(paths: Sequence[Path]) -> tuple[list[Dump], pd.DataFrame]:
    """The dumps (their entries dropped once tabled: one rank's records in memory at a
    time) and the table of every entry."""
    dumps: list[Dump] = []
    tables = []
    seen: dict[int, Path] = {}
    for p in paths:
        d = read_dump(p)
        if d.rank in seen:
            raise UserError(
                f"{d.path}: rank {d.rank} again (also {seen[d.rank]}); pass one dump per rank"
            )
        seen[d.rank] = d.path
        tables.append(entries_table([d]))
        dumps.append(dataclasses.replace(d, entries=[]))
    order = sorted(range(len(dumps)), key=lambda i: dumps[i].rank)
    return [dumps[i] for i in order], concat_entries([tables[i] for i in order])


def analyze_dumps(
    paths: Sequence[Path], *, align: bool = True, shared_host: str | None = None,
    trace_collectives: pd.DataFrame | None = None,
) -> FlightReport:  # fmt: skip
    """The flight report of the dumps in ``paths``; ``shared_host``: the one host every rank
    ran on (its clock is theirs: not aligned); ``trace_collectives``: the ``collectives``
    table of a profiler trace of the same run (joined by group and sequence)."""
    dumps, table = _read(paths)
    entries = with_key(table)
    if entries.empty:
        raise UserError(
            f"{dumps[0].path}: the dumps hold no entries; was TORCH_FR_BUFFER_SIZE set?"
        )
    why = None if align else "--no-align"
    if align and shared_host:
        why = f"every rank ran on {shared_host} (one clock)"
    clocks = estimate(entries, apply=why is None, why_not=why)
    coll, per_rank = match(entries, row_offsets(entries, clocks), _pg_ranks(dumps))
    coll = steps_and_slots(coll)
    coll, note = join_trace(coll, trace_collectives)
    per_rank = per_rank.merge(coll[["pg", "is_p2p", "seq_id", "phase", "step", "slot", "unit"]],
                              on=["pg", "is_p2p", "seq_id"], how="left")  # fmt: skip
    warnings = _warnings(dumps, coll)
    found = flight_findings(coll, per_rank, entries, dumps_status(dumps), clocks)
    return FlightReport(tuple(d.path for d in dumps), entries, coll, per_rank, clocks, note,
                        found, warnings)  # fmt: skip


def dumps_status(dumps: Sequence[Dump]) -> dict[int, dict[str, Any]]:
    """Per rank, ``pg_status``: per group, the last collective enqueued/started/completed."""
    return {d.rank: d.pg_status for d in dumps}


def _warnings(dumps: Sequence[Dump], coll: pd.DataFrame) -> tuple[str, ...]:
    out = []
    ranks = sorted(d.rank for d in dumps)
    gaps = sorted(set(range(ranks[-1] + 1)) - set(ranks))
    if gaps:
        out.append(f"no dump of rank(s) {', '.join(map(str, gaps))}: their collectives are unknown")
    n_window = int(coll["out_of_window"].notna().sum())
    if n_window:
        out.append(f"{n_window} collective(s) are older than some rank's ring buffer keeps "
                   "(TORCH_FR_BUFFER_SIZE): matched on the ranks that still hold them")  # fmt: skip
    return tuple(out)


def num_steps(coll: pd.DataFrame) -> int:
    s = coll["step"].dropna()
    return int(s.max()) + 1 if len(s) else 0
