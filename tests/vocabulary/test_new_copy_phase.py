"""A copy phase added to the phase table (``overlapscope/phases.py``) and nothing else is
recognised, analysed, drawn and replayed (issue 41, point 5): the loader puts its ranges on
the memory lane, the analysis counts its exposed copy time and lists it among the memory
levers, the dashboard draws it in the memory row under its name, and the GPU replay takes its
wait for a drain of the device, as it does the offload copies'. The package is copied and the
one file edited (a row of an enum cannot be patched in place); the check runs in a subprocess
on the copy. Outside the table and the engine that emits them, no code names a copy phase."""

from __future__ import annotations

import re
from pathlib import Path

from overlapscope.phases import COPY_PHASES
from tests.conftest import REPO
from tests.vocabulary.edited_table import with_rows

# Activation offload: a unit's saved activations copied to the host after its forward.
NEW_ROWS = """\
    ACT_D2H =     ("act_d2h",     _M,   (),    Row.MEMORY,     "#7F7F7F", "copy activations device→host", None)
    ACT_D2H_WAIT = ("act_d2h.wait", _W, (),    Row.WAIT,       "#E5E5E5", "wait: activation copy", None)
"""

# One step of one rank: forward, the new copy (10 µs, no compute under it), the host waiting
# on it (15 µs), the optimizer.
CHECK = """
import json, sys
from pathlib import Path
import pandas as pd
from dashboards import palette
from dashboards.figures import step_panel, timeline_figure
from overlapscope.analysis import analyze
from overlapscope.analysis.report import sections
from overlapscope.phases import COPY_PHASES, Phase
from overlapscope.sim.engine_cuts import COPY_WAITS, engine_cuts
from overlapscope.sim.launches import StepWindow
from overlapscope.sim.schedule import Op, OpKind, Program
from overlapscope.trace.run.loader import load_run
from tests.trace.kineto import step, trace, write, x

run = Path(sys.argv[1])
ranges = [("ovs/fwd/u0", 0, 20), ("ovs/act_d2h/u0", 20, 10), ("ovs/act_d2h.wait/u0", 30, 15),
          ("ovs/optim/all", 60, 10)]
write(run / "rank-0.pt.trace.json", trace(0, 1, [step(1, 0, 100), *(x(*r) for r in ranges)]))
a = analyze(load_run(run))
levers = a.levers.astype({"phase": str})
panel = step_panel("run", a.timeline, a.exposed, a.steps, 1)
fig = timeline_figure([panel])
host = pd.DataFrame({"name": [r[0] for r in ranges], "ts_us": [float(r[1]) for r in ranges],
                     "end_us": [float(r[1] + r[2]) for r in ranges]})
program = Program((Op(OpKind.COMPUTE, Phase.FWD, "u0"), Op(OpKind.COMPUTE, Phase.OPTIM, "all")),
                  (), 1, 0, 0, 0)
win = StepWindow(1, 0.0, 100.0, 90.0, 100.0, float("nan"))
cuts, blocked, drains = engine_cuts(host, win, program, {})
print(json.dumps({
    "copies": [p.value for p in COPY_PHASES],
    "copy_waits": [p.value for p in COPY_WAITS],
    "lanes": {str(p): str(l) for p, l in a.timeline[["phase", "lane"]].drop_duplicates()
              .astype(str).itertuples(index=False)},
    "exposed_copy": float(a.ranks["exposed_memory_per_step_us"].iloc[0]),
    "levers": levers[["unit", "phase", "time_per_step_us", "exposed_per_step_us"]]
              .to_dict("records"),
    "report": [title for title, *_ in sections(a)],
    "style": palette.PHASE_STYLE["act_d2h"],
    "drawn": [[t.name, t.marker.color] for t in fig.data],
    "cuts": [list(c.key[:3]) for c in cuts],
    "blocked": [[float(s), float(e)] for s, e in zip(blocked.starts, blocked.ends)],
    "drains": list(drains),
}))
"""


def test_a_copy_phase_added_to_the_table_is_recognised_analysed_drawn_replayed(
    tmp_path: Path,
) -> None:
    got = with_rows(tmp_path, "D2H", NEW_ROWS, CHECK)
    # recognised: a copy phase of the table, its ranges on the memory lane, its wait a wait
    assert got["copies"] == ["h2d", "d2h", "act_d2h"]
    assert got["lanes"]["act_d2h"] == "memory" and got["lanes"]["act_d2h.wait"] == "wait"
    # analysed: its 10 µs with no compute under it are exposed copy time, and a memory lever
    assert got["exposed_copy"] == 10.0
    assert {
        "unit": "u0",
        "phase": "act_d2h",
        "time_per_step_us": 10.0,
        "exposed_per_step_us": 10.0,
    } in got["levers"]
    assert any("act_d2h" in title for title in got["report"])
    # drawn: the memory row, its colour, its name in the legend
    assert got["style"] == ["memory", "#7F7F7F"]
    assert ["copy activations device→host", "#7F7F7F"] in got["drawn"]
    assert ["wait: activation copy", "#E5E5E5"] in got["drawn"]
    # replayed: no op of the program, its wait blocked time and a drain of the device
    assert got["copy_waits"] == ["h2d.wait", "d2h.wait", "act_d2h.wait"]
    assert got["cuts"] == [["compute", "fwd", "u0"], ["compute", "optim", "all"]]
    assert [30.0, 45.0] in got["blocked"] and got["drains"] == [30.0]


def test_no_code_outside_the_table_and_the_engine_names_a_copy_phase() -> None:
    """``phases.py`` says nothing else names phases one by one: for the copy phases, only
    the engine (which emits them) spells one."""
    members = "|".join(p.name for p in COPY_PHASES)
    spelled = re.compile(rf"\bPhase\.({members})(_WAIT)?\b")
    found = []
    for root in ("overlapscope", "dashboards"):
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel == "overlapscope/phases.py" or rel.startswith("overlapscope/engine/"):
                continue
            found += [f"{rel}: {m[0]}" for m in spelled.finditer(path.read_text())]
    assert found == []
