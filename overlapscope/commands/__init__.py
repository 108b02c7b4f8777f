"""The subcommands: ``overlapscope NAME`` is the module :data:`COMMANDS` names, imported only
when that command is parsed, so that ``overlapscope --help`` loads none of them and each
command only what it needs.

Each module defines ``add_parser(subparsers)`` (its flags; ``help`` from :data:`COMMANDS`)
and ``run(args) -> int``, and imports at its top only what its parser needs: the rest when
it runs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Command:
    module: str  # under overlapscope.commands
    help: str  # the line ``overlapscope --help`` shows


COMMANDS: dict[str, Command] = {
    "run": Command("run", "profile N local ranks of the instrumented engine"),
    "analyze": Command("analyze", "exposed communication, overlap %%, NCCL wait and bandwidth from traces"),
    "diagnose": Command("diagnose", "rank what costs time (exposed all-gathers, limiter, stragglers, network)"),
    "dashboard": Command("dashboard", "web dashboard: timelines, exposed communication per unit, trade-offs"),
    "sweep": Command("sweep", "run prefetch configurations side by side and compare them"),
    "bench-collectives": Command("bench_collectives", "measure all-gather / reduce-scatter bus bandwidth over the lab link"),
    "whatif": Command("whatif", "predict step time and memory under another policy or network from one run"),
}  # fmt: skip
