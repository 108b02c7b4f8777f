"""Known answers for the torch FSDP compute attribution (overlapscope/sim/torch_fsdp.py).

A one-step timeline is laid out from the schedule's own program: every issued collective is
a 1 µs comm row, every compute op a row of a known length, labelled with its unit and phase
where it is a unit's (as the analysis labels torch's hook regions) and unlabelled where it
is the root's or the optimizer's; backward ops sit in autograd's node ranges. The
attribution must give each op back its own length, also where two root ops are adjacent
(the forward's last piece and the backward's first; the backward's last and the optimizer)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from overlapscope.config import Policy
from overlapscope.sim.schedule import OpKind, Scenario, StepModel, build_program
from overlapscope.sim.torch_fsdp import AUTOGRAD_NODE, attribute_compute
from overlapscope.trace.naming.ranges import OPTIM_UNIT, ROOT_UNIT

UNITS = ("a", "b", "c")


def _layout(policy: Policy) -> tuple[pd.DataFrame, pd.DataFrame, dict[tuple[str, str, int], float], object]:  # fmt: skip
    model = StepModel(UNITS, dict.fromkeys((*UNITS, ROOT_UNIT), 64), dict.fromkeys((*UNITS, ROOT_UNIT), 64), blocking=True)  # fmt: skip
    program = build_program(model, Scenario(policy))
    rows, want, t = [], {}, 0.0
    for i, op in enumerate(program.ops):
        if op.kind is OpKind.ISSUE:
            rows.append(("comm", None, None, "gloo:all_gather", t, t + 1.0))
            t += 1.0
        elif op.kind is OpKind.COMPUTE:
            dur = 10.0 + 7.0 * i
            own = op.unit not in (ROOT_UNIT, OPTIM_UNIT)
            phase, unit = (op.phase.value, op.unit) if own else (None, None)
            # backward ops run inside autograd's node ranges, as torch's profiler records
            outer = AUTOGRAD_NODE + ": MmBackward0" if op.phase.value == "bwd" else "aten::mm"
            rows.append(("compute", phase, unit, outer, t, t + dur))
            # a nested CPU op inside it, counted once
            rows.append(("compute", phase, unit, "aten::addmm", t + 1.0, t + dur / 2))
            want[(op.phase.value, op.unit, op.piece)] = dur
            t += dur
    tl = pd.DataFrame(rows, columns=["lane", "phase", "unit", "name", "start_us", "end_us"])
    tl = tl.assign(rank=0, step=0, dur_us=tl["end_us"] - tl["start_us"])
    steps = pd.DataFrame({"rank": [0], "step": [0], "start_us": [0.0], "end_us": [t]})
    return tl, steps, want, program


@pytest.mark.parametrize("policy", list(Policy))
def test_each_compute_op_gets_its_own_time(policy: Policy) -> None:
    tl, steps, want, program = _layout(policy)
    comp = attribute_compute(tl, steps, program)  # type: ignore[arg-type]
    got = {(r.phase, r.unit, r.piece): r.dur_us for r in comp.itertuples()}
    # the root's pieces between the units are kept apart from the units' own compute
    assert got == pytest.approx(want)


def test_free_time_inside_a_units_span_goes_to_the_unit() -> None:
    tl, steps, want, program = _layout(Policy.BACKWARD_PRE)
    fwd_b = tl[(tl["unit"] == "b") & (tl["phase"] == "fwd")].iloc[0]
    # split b's forward in two labelled halves with an unlabelled op between (a hook's copy)
    mid = (fwd_b["start_us"] + fwd_b["end_us"]) / 2
    keep = ~((tl["unit"] == "b") & (tl["phase"] == "fwd"))
    extra = pd.DataFrame(
        {
            "lane": "compute",
            "phase": ["fwd", None, "fwd"],
            "unit": ["b", None, "b"],
            "name": ["aten::mm", "aten::copy_", "aten::mm"],
            "start_us": [fwd_b["start_us"], mid - 1.0, mid + 1.0],
            "end_us": [mid - 1.0, mid + 1.0, fwd_b["end_us"]],
        }
    ).assign(rank=0, step=0)
    tl2 = pd.concat([tl[keep], extra.assign(dur_us=extra["end_us"] - extra["start_us"])])
    comp = attribute_compute(tl2, steps, program)  # type: ignore[arg-type]
    got = comp.set_index(["phase", "unit", "piece"])["dur_us"]
    assert got[("fwd", "b", 0)] == pytest.approx(want[("fwd", "b", 0)])
    assert np.isclose(got.sum(), sum(want.values()))
