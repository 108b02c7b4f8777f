"""Collective sizes from whatever the trace carries (issue 30 point 5), on hand-built
traces in each shape: ``In/Out msg nelems`` x ``dtype``; else ``Input Dims`` x the element
size of ``Input type``; else the NCCL kernel's own arguments; else unknown (null), with
bus bandwidth wherever a size is known."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from overlapscope.analysis import analyze
from overlapscope.trace.read.comm_args import kernel_dtype_bytes
from overlapscope.trace.run.loader import load_run
from tests.trace.kineto import kernel, launch, step, trace, write, x

AG_KERNEL = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
RS_KERNEL = "ncclKernel_ReduceScatter_RING_LL_Sum_bf16(ncclWorkElem)"
SENDRECV = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
WORLD = 4


def _one_collective(
    tmp: Path,
    kernel_name: str,
    rpc_args: dict[str, Any] | None,
    own: dict[str, Any] | None,
    annotation: str | None = None,
    annotation_args: dict[str, Any] | None = None,
) -> Path:
    """One rank's trace: a step, ``record_param_comms`` (with ``rpc_args``; None: absent)
    around an optional ``nccl:<op>`` range around the launch of one NCCL kernel (with its
    own arguments ``own``)."""
    events = [step(1, 0.0, 1000.0)]
    if rpc_args is not None:
        events.append(x("record_param_comms", 10.0, 50.0, cat="cpu_op", args=rpc_args))
    if annotation is not None:
        cat = "user_annotation" if annotation_args is None else "cpu_op"
        events.append(x(annotation, 12.0, 40.0, cat=cat, args=annotation_args))
    events += [launch(20.0, 7), kernel(kernel_name, 100.0, 200.0, 7, stream=20, extra=own)]
    return write(tmp / "rank-0.json", trace(0, WORLD, events, backend="nccl"))


def _collective(path: Path) -> dict[str, Any]:
    a = analyze(load_run(path, allow_missing_ranks=True))
    (row,) = a.collectives.to_dict("records")
    return row


MSG = {"In msg nelems": 1000, "Out msg nelems": 4000, "dtype": "Float", "Group size": 4}


@pytest.mark.parametrize(
    ("rpc", "own", "want_bytes"),
    [
        pytest.param(MSG, None, 16000, id="msg-nelems-on-record_param_comms"),
        pytest.param(
            {
                **MSG,
                "In msg nelems": -1,
                "Out msg nelems": -1,
                "Input Dims": [[1000], [], []],
                "Input type": ["float", "Int", "String"],
            },
            None,
            16000,
            id="minus-one-counts-then-input-dims",
        ),
        pytest.param(
            {"Input Dims": [[10, 100], [], []], "Input type": ["c10::BFloat16", "Int", ""]},
            None,
            10 * 100 * 2 * WORLD,
            id="input-dims-of-an-older-profiler",
        ),
        pytest.param(
            {"Input Dims": [[], []], "Input type": ["TensorList", "Scalar"]},
            {"In msg nelems": 250, "Out msg nelems": 1000, "dtype": "Half"},
            2000,
            id="kernel-arguments",
        ),
        pytest.param(None, {"Out msg nelems": 1000}, -1, id="kernel-counts-no-type-in-name"),
        pytest.param(None, None, -1, id="nothing-known"),
    ],
)
def test_all_gather_size_in_each_shape(tmp_path: Path, rpc, own, want_bytes) -> None:
    row = _collective(_one_collective(tmp_path, AG_KERNEL, rpc, own))
    assert row["kind"] == "all_gather"
    if want_bytes < 0:
        assert row["bytes"] != row["bytes"]  # NaN: null in the JSON
        assert row["busbw_gbps"] != row["busbw_gbps"]
        return
    assert row["bytes"] == want_bytes
    # a one-rank run: transfer = the kernel (200 µs); bus factor (n-1)/n with n = WORLD
    assert row["algbw_gbps"] == pytest.approx(want_bytes / 200e-6 / 1e9)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * (WORLD - 1) / WORLD)


def test_kernel_counts_take_the_element_type_from_the_kernel_name(tmp_path: Path) -> None:
    """``..._Sum_bf16``: 2 bytes per element; a reduce-scatter's size is its input."""
    own = {"In msg nelems": 4000, "Out msg nelems": 1000}
    row = _collective(_one_collective(tmp_path, RS_KERNEL, None, own))
    assert (row["kind"], row["bytes"]) == ("reduce_scatter", 8000)


def test_record_param_comms_beats_the_kernel_and_names_the_collective(tmp_path: Path) -> None:
    """The issuing op's counts come first; its ``Collective name`` names a generic kernel."""
    rpc = {**MSG, "Collective name": "_allgather_base", "Process Group Name": "pg7"}
    own = {"In msg nelems": 5, "Out msg nelems": 20, "dtype": "Float"}
    path = _one_collective(tmp_path, "ncclDevKernel_Generic(x)", rpc, own)
    row = _collective(path)
    assert (row["kind"], row["group"], row["bytes"]) == ("all_gather", "pg7", 16000)


def test_the_nccl_range_around_the_launch_names_a_sendrecv_kernel(tmp_path: Path) -> None:
    """An all-to-all runs as NCCL SendRecv kernels; ``nccl:all_to_all`` around the launch
    says so, and the issuing op's first input (bytes) is its size."""
    rpc = {"Input Dims": [[419430400], [], []], "Input type": ["unsigned char", "Scalar", ""]}
    path = _one_collective(tmp_path, SENDRECV, rpc, None, annotation="nccl:all_to_all")
    row = _collective(path)
    assert (row["kind"], row["bytes"]) == ("all_to_all", 419430400)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * (WORLD - 1) / WORLD)


# A DDP bucket's all-reduce (issue 40 point 4), as a real 8-rank V100 job records it: the
# issuing op's inputs are a tensor list with no dims, and the flat bucket is the input of the
# ``nccl:all_reduce`` range inside it.
BUCKET_RPC = {
    "Input Dims": [[], [], [], [], []],
    "Input type": ["TensorList", "Int", "String", "Scalar", "Scalar"],
    "Collective name": "allreduce",
    "Group size": WORLD,
}
AR_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"


def test_a_bucketed_all_reduce_is_sized_by_the_nccl_range_inside_it(tmp_path: Path) -> None:
    bucket = {"Input Dims": [[394241]], "Input type": ["float"]}
    path = _one_collective(tmp_path, AR_KERNEL, BUCKET_RPC, None, "nccl:all_reduce", bucket)
    row = _collective(path)
    assert (row["kind"], row["bytes"]) == ("all_reduce", 394241 * 4)  # 1,576,964
    assert row["algbw_gbps"] == pytest.approx(394241 * 4 / 200e-6 / 1e9)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 2 * (WORLD - 1) / WORLD)


def test_the_nccl_range_of_an_all_gather_holds_its_shard(tmp_path: Path) -> None:
    """The range's input is what the rank gave the process group: one shard of the group's
    gathered buffer."""
    rpc = {**BUCKET_RPC, "Collective name": "allgather"}
    shard = {"Input Dims": [[1000]], "Input type": ["c10::BFloat16"]}
    path = _one_collective(tmp_path, AG_KERNEL, rpc, None, "nccl:all_gather", shard)
    assert _collective(path)["bytes"] == 1000 * 2 * WORLD


def test_the_issuing_ops_counts_beat_the_nccl_range(tmp_path: Path) -> None:
    other = {"Input Dims": [[7]], "Input type": ["float"]}
    path = _one_collective(tmp_path, AG_KERNEL, MSG, None, "nccl:all_gather", other)
    assert _collective(path)["bytes"] == 16000


def test_without_a_name_a_sendrecv_kernel_stays_send_recv(tmp_path: Path) -> None:
    row = _collective(_one_collective(tmp_path, SENDRECV, None, None))
    assert row["kind"] == "send_recv" and row["bytes"] != row["bytes"]


@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 4),
        ("ncclKernel_AllReduce_RING_LL_Sum_bf16(ncclWorkElem)", 2),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", 1),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 0),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", 0),
    ],
)
def test_element_size_in_a_kernel_name(name: str, size: int) -> None:
    assert kernel_dtype_bytes(name) == size
