"""Every flag is range-checked at parse time, for every subcommand, in one line naming the
flag (issue #21, point 3); a dashboard port in use is one line too."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.reliability.helpers import SAMPLE_RUN, assert_one_line_error, cli

OUT = ["--out", "/nonexistent-overlapscope-test/x"]
BAD_FLAGS = {
    "run-nproc-0": (["run", "--nproc", "0", *OUT], "--nproc"),
    "run-nproc-huge": (["run", "--nproc", "100000", *OUT], "--nproc"),
    "run-layers-0": (["run", "--layers", "0", *OUT], "--layers"),
    "run-dim-negative": (["run", "--dim", "-3", *OUT], "--dim"),
    "run-dim-huge": (["run", "--dim", "10000000", *OUT], "--dim"),
    "run-heads-0": (["run", "--heads", "0", *OUT], "--heads"),
    "run-seq-len-0": (["run", "--seq-len", "0", *OUT], "--seq-len"),
    "run-vocab-1": (["run", "--vocab", "1", *OUT], "--vocab"),
    "run-steps-0": (["run", "--steps", "0", *OUT], "--steps"),
    "run-batch-0": (["run", "--global-batch", "0", *OUT], "--global-batch"),
    "run-seed-negative": (["run", "--seed", "-1", *OUT], "--seed"),
    "run-profile-active-0": (["run", "--profile-active", "0", *OUT], "--profile-active"),
    "run-profile-wait-negative": (["run", "--profile-wait", "-1", *OUT], "--profile-wait"),
    "run-lr-nan": (["run", "--lr", "nan", *OUT], "--lr"),
    "run-link-zero": (["run", "--link-gbit", "0", *OUT], "--link-gbit"),
    "run-threads-negative": (["run", "--threads-per-rank", "-1", *OUT], "--threads-per-rank"),
    "run-typo": (["run", "--nprocs", "2", *OUT], "--nprocs"),
    "run-not-an-int": (["run", "--layers", "two", *OUT], "--layers"),
    "sweep-repeats-0": (["sweep", "--repeats", "0", *OUT], "--repeats"),
    "sweep-nproc-0": (["sweep", "--nproc", "0", *OUT], "--nproc"),
    "sweep-bad-policy": (["sweep", "--policies", "sometimes", *OUT], "--policies"),
    "bench-nproc-0": (["bench-collectives", "--nproc", "0"], "--nproc"),
    "bench-nproc-1": (["bench-collectives", "--nproc", "1"], "--nproc"),
    "bench-nproc-huge": (["bench-collectives", "--nproc", "100000"], "--nproc"),
    "bench-iters-0": (["bench-collectives", "--iters", "0"], "--iters"),
    "bench-warmup-negative": (["bench-collectives", "--warmup", "-1"], "--warmup"),
    "bench-timeout-0": (["bench-collectives", "--timeout", "0"], "--timeout"),
    "bench-size-0": (["bench-collectives", "--sizes", "0"], "--sizes"),
    "bench-size-huge": (["bench-collectives", "--sizes", "99999999G"], "--sizes"),
    "dashboard-port-0": (["dashboard", "--port", "0"], "--port"),
    "dashboard-port-huge": (["dashboard", "--port", "70000"], "--port"),
    "whatif-scale-0": (["whatif", str(SAMPLE_RUN), "--policy", "none", "--bandwidth-scale", "0"], "--bandwidth-scale"),
    "whatif-limit-0": (["whatif", str(SAMPLE_RUN), "--policy", "none", "--limit-all-gathers", "0"], "--limit-all-gathers"),
    "analyze-typo": (["analyze", str(SAMPLE_RUN), "--jsn", "x"], "--jsn"),
    "unknown-command": (["analyse", str(SAMPLE_RUN)], "analyse"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_FLAGS), ids=list(BAD_FLAGS))
def test_bad_flag_is_one_line_before_any_work(
    case: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args, flag = BAD_FLAGS[case]
    assert_one_line_error(cli(capsys, *args), flag)
    assert not Path("/nonexistent-overlapscope-test").exists()


def test_busy_dashboard_port_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        result = cli(capsys, "dashboard", str(SAMPLE_RUN), "--port", str(port), "--no-warm")
    assert_one_line_error(result, f"--port {port}", "pick another --port")
