"""A phase added to the phase table (``overlapscope/phases.py``) and nothing else reaches
every consumer: the loader labels its ranges, the analysis' tables carry it, the dashboard
draws it in its row and colour under its name, and the critical path says its words
(issue 31, point 3). The package is copied and the one file edited; the check runs in a
subprocess on the copy."""

from __future__ import annotations

from pathlib import Path

from tests.vocabulary.edited_table import with_rows

# HSDP's all-reduce of the gradients across replicas, after the reduce-scatter.
NEW_ROWS = """\
    AR_REPLICA =  ("ar_replica",  _I,   _AR,   Row.REDUCE,     "#17BECF", "replica all-reduce", _BW)
    AR_REPLICA_WAIT = ("ar_replica.wait", _W, _AR, Row.WAIT,   "#9EDAE5", "wait: replica all-reduce", _BW)
"""

# One step of one rank: the new phase issued, its gloo op, and the wait on it.
CHECK = """
import json, sys
from pathlib import Path
from dashboards import palette
from dashboards.figures import step_panel, timeline_figure
from overlapscope.analysis import analyze
from overlapscope.analysis.critical_path.report import link_name
from overlapscope.trace.run.loader import load_run
from tests.trace.kineto import GLOO_TID, gloo, step, thread_name, trace, write, x

run = Path(sys.argv[1])
events = [
    thread_name(GLOO_TID, "pt_gloo_runloop"),
    step(1, 0, 100),
    x("ovs/fwd/u0", 0, 20),
    x("ovs/ar_replica/u0", 20, 1),
    x("ovs/ar_replica.wait/u0", 21, 30),
    x("ovs/optim/all", 60, 10),
    gloo("all_reduce", 21, 30, 1000),
]
write(run / "rank-0.pt.trace.json", trace(0, 1, events))
a = analyze(load_run(run))
units = a.units.astype({"phase": str, "kind": str})
panel = step_panel("run", a.timeline, a.exposed, a.steps, 1)
fig = timeline_figure([panel])
print(json.dumps({
    "units": units[["unit", "phase", "kind", "exposed_per_step_us"]].to_dict("records"),
    "timeline": sorted(set(a.timeline["phase"].dropna().astype(str))),
    "style": palette.PHASE_STYLE["ar_replica"],
    "drawn": [[t.name, t.marker.color] for t in fig.data],
    "words": link_name(0, "comm", "u0", "ar_replica"),
}))
"""


def test_a_phase_added_to_the_table_reaches_every_consumer(tmp_path: Path) -> None:
    got = with_rows(tmp_path, "AR", NEW_ROWS, CHECK)
    # the analysis: the unit's replica all-reduce, 30 µs exposed (the wait)
    assert {
        "unit": "u0",
        "phase": "ar_replica",
        "kind": "all_reduce",
        "exposed_per_step_us": 30.0,
    } in got["units"]
    assert {"ar_replica", "ar_replica.wait"} <= set(got["timeline"])
    # the dashboard: its row and colour, its name in the legend
    assert got["style"] == ["reduce-scatter", "#17BECF"]
    assert ["replica all-reduce", "#17BECF"] in got["drawn"]
    assert ["wait: replica all-reduce", "#9EDAE5"] in got["drawn"]
    # the critical path's words
    assert got["words"] == "rank 0's exposed replica all-reduce of u0"
