"""The file: the run's part (header, the run's process and findings), each rank's part, the
closing part, joined into one gzip member (:mod:`~overlapscope.perfetto.deflate`) under a
temporary name, renamed into place when whole.

:func:`write_perfetto` writes every part in this process, a rank at a time;
:func:`assemble` joins parts written elsewhere (Dask tasks) by copying their bytes.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from overlapscope.analysis.api import RunAnalysis
from overlapscope.errors import UserError
from overlapscope.outputs import is_special
from overlapscope.perfetto import events as ev
from overlapscope.perfetto.deflate import GZIP_HEADER, PartSum, PartWriter, combine, trailer
from overlapscope.perfetto.part import write_part
from overlapscope.perfetto.plan import Plan, aligned_comm, make_plan, rank_parts
from overlapscope.perfetto.tracks import clean
from overlapscope.trace.read.merged import EXPORT_KEY
from overlapscope.trace.run.loader import RunTraces

FLAG = "--perfetto"
RUN_NAME = "overlapscope · the whole run"


def header_text(header: dict[str, object]) -> bytes:
    """The document up to its events' ``[`` (one line: the export's own fields first)."""
    return (
        b'{"'
        + EXPORT_KEY.encode()
        + b'":'
        + ev.dumps(header)
        + b',"displayTimeUnit":"ms","traceEvents":[\n'
    )


def write_head(out: BinaryIO, plan: Plan) -> PartSum:
    """The run's part: the header, the run's process, the findings of the whole run."""
    writer = PartWriter(out)
    writer.write(header_text(plan.header))
    pid = ev.RUN_PID
    for m in (
        ev.metadata("process_name", pid, pid, {"name": RUN_NAME}),
        ev.metadata("process_sort_index", pid, pid, {"sort_index": -1}),
    ):
        writer.write(ev.dumps(m) + b",\n")
    marks = plan.marks[plan.marks["rank"] < 0]
    if len(marks):
        tid = ev.RUN_PID  # the run's process has one track
        for m in ev.thread_names(pid, tid, ev.PREFIX + "findings", 0):
            writer.write(ev.dumps(m) + b",\n")
        for mark in marks.drop(columns="rank").to_dict("records"):
            args = clean({k: v for k, v in mark.items() if k != "ts_us"})
            writer.write(ev.dumps(ev.instant(str(mark["title"]), pid, tid, mark["ts_us"], args)))
            writer.write(b",\n")
    return writer.close()


def write_tail(out: BinaryIO) -> PartSum:
    """The closing part: one last event (no comma after it) and the document's end."""
    writer = PartWriter(out, final=True)
    last = ev.metadata("process_labels", ev.RUN_PID, ev.RUN_PID, {"labels": "overlapscope"})
    writer.write(ev.dumps(last) + b"\n]}\n")
    return writer.close()


def write_whole(path: Path, body: Callable[[BinaryIO], list[PartSum]]) -> None:
    """``path`` written whole: the gzip header, ``body``'s parts, the trailer, in a
    temporary sibling renamed into place (a device or pipe is written in place)."""
    special = is_special(path)
    target = path if special else Path(os.path.realpath(path))
    tmp = target if special else target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        with open(tmp, "wb") as out:
            out.write(GZIP_HEADER)
            sums = body(out)
            out.write(trailer(combine(sums)))
        if not special:
            os.replace(tmp, target)
    except OSError as e:
        if not special:
            tmp.unlink(missing_ok=True)
        raise UserError(f"{FLAG} {path}: cannot write ({e.strerror}); pick another path") from None
    except BaseException:
        if not special:
            tmp.unlink(missing_ok=True)
        raise


def write_perfetto(
    path: Path,
    analysis: RunAnalysis,
    run: RunTraces,
    steps: tuple[int, ...] | None = None,
    ranks: tuple[int, ...] | None = None,
) -> tuple[str, ...]:
    """Write the export of ``analysis`` (of the loaded ``run``) to ``path``, a rank at a
    time; the warnings (what was left out)."""
    plan = make_plan(analysis, run.ranks, steps, ranks)
    comm = aligned_comm(run.events, analysis.clocks)
    warnings = list(plan.warnings)

    def body(out: BinaryIO) -> list[PartSum]:
        sums = [write_head(out, plan)]
        for part in rank_parts(analysis, run.ranks, plan, comm):
            done = write_part(part, out)
            sums.append(done.sum)
            warnings.extend(done.warnings)
        sums.append(write_tail(out))
        return sums

    write_whole(path, body)
    return tuple(warnings)


def assemble(path: Path, plan: Plan, parts: Iterable[tuple[Path, PartSum]]) -> None:
    """Write ``path`` from parts written elsewhere (``(file, sum)`` per rank, in order)."""

    def body(out: BinaryIO) -> list[PartSum]:
        sums = [write_head(out, plan)]
        for file, done in parts:
            with open(file, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
            sums.append(done)
        sums.append(write_tail(out))
        return sums

    write_whole(path, body)
