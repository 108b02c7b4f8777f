"""Invariants of the time model over generated traces (hypothesis).

For any multi-stream GPU trace (compute, NCCL and memcpy kernels on several streams,
launched from CPU steps) and any CPU gloo trace: each step's parts add up to the step and
are non-negative; overlap % is in [0, 100]; exposed communication never exceeds
communication; the overlap efficiency is in [0, 1] or null; and loading plus analysing never
raises anything but the project's own error.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from overlapscope.analysis import analyze
from overlapscope.errors import UserError
from overlapscope.trace.run.loader import load_run
from tests.trace.kineto import gloo, kernel, launch, step, trace, x

PARTS = ("compute", "exposed_comm", "exposed_memory", "other", "idle")
KERNELS = (
    ("void gemm_kernel<float>()", 7, "kernel"),
    ("void relu_kernel<float>()", 8, "kernel"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*)", 20, "kernel"),
    ("ncclKernel_ReduceScatter_RING_LL_Sum_float(ncclWork*)", 21, "kernel"),
    ("Memcpy HtoD (Pageable -> Device)", 9, "gpu_memcpy"),
    ("cudaDeviceSynchronize_Sync", 7, "kernel"),
)
SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

times = st.floats(min_value=0.0, max_value=500.0, allow_nan=False)
durs = st.floats(min_value=0.0, max_value=80.0, allow_nan=False)


@st.composite
def gpu_events(draw: Any) -> list[dict[str, Any]]:
    num_steps = draw(st.integers(0, 3))
    events: list[dict[str, Any]] = []
    for s in range(num_steps):
        events.append(step(s + 1, s * 100.0, draw(st.floats(1.0, 100.0))))
    for corr in range(draw(st.integers(1, 25))):
        name, stream, cat = draw(st.sampled_from(KERNELS))
        at = draw(times)
        events.append(launch(draw(st.floats(0.0, 320.0)), corr))
        events.append(kernel(name, at, draw(durs), corr, stream=stream, cat=cat))
    return events


@st.composite
def cpu_events(draw: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [step(1, 0.0, draw(st.floats(1.0, 400.0)))]
    for _ in range(draw(st.integers(0, 12))):
        events.append(x("aten::mm", draw(times), draw(durs), cat="cpu_op"))
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["all_gather", "all_reduce"]))
        events.append(gloo(op, draw(times), draw(durs), draw(st.integers(1, 1000))))
    for _ in range(draw(st.integers(0, 4))):
        events.append(x("c10d::allgather_", draw(times), draw(durs), cat="cpu_op"))
    return events


def check(events: list[dict[str, Any]], backend: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "rank-0.json"
        # json (not orjson) writes any int, and NaN as a token orjson refuses to read
        path.write_text(json.dumps(trace(0, 1, events, backend=backend)))
        try:
            a = analyze(load_run(path))
        except UserError:
            return
    for table, suffix in ((a.steps, "_us"), (a.ranks, "_total_us")):
        for row in table.to_dict("records"):
            parts = [row[f"{p}{suffix}"] for p in PARTS]
            assert all(v >= -1e-9 for v in parts), row
            assert math.isclose(sum(parts), row[f"step_time{suffix}"], abs_tol=1e-6), row
            assert row[f"exposed_comm{suffix}"] <= row[f"comm{suffix}"] + 1e-9, row
            pct = row["overlap_pct"]
            assert math.isnan(pct) or 0.0 <= pct <= 100.0 + 1e-9, row
    eff = a.bound["overlap_efficiency"].dropna()
    assert eff.between(0.0, 1.0).all()
    assert (a.bound["actual_per_step_us"] <= a.bound["serial_per_step_us"] + 1e-6).all()
    units = a.units.groupby("rank")["exposed_total_us"].sum()
    for rank, total in units.items():
        own = float(a.ranks.set_index("rank").loc[rank, "exposed_comm_total_us"])
        assert math.isclose(total, own, abs_tol=1e-6) or total == 0.0


@SETTINGS
@given(gpu_events())
def test_gpu_partition_adds_up(events):
    check(events, "nccl")


@SETTINGS
@given(cpu_events())
def test_cpu_partition_adds_up(events):
    check(events, "gloo")


junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@SETTINGS
@given(
    st.lists(
        st.fixed_dictionaries(
            {"ph": st.one_of(st.just("X"), st.just("M"), junk), "name": junk, "ts": junk},
            optional={"dur": junk, "tid": junk, "pid": junk, "args": junk, "cat": junk},
        ),
        max_size=12,
    )
)
def test_analysis_raises_only_user_errors(events):
    base = [step(1, 0.0, 50.0), x("aten::mm", 1.0, 5.0, cat="cpu_op")]
    check(base + events, "gloo")
