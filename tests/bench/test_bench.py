"""bench-collectives end to end: real ranks in the lab, a real shaped link.

What a collective *does* on the wire is checked, never how fast: each rank's lab interface
counts the bytes it transmitted (kernel counters, headers included), and a ring must send every
byte once, ``size * (n-1)/n`` per rank, within the TCP/IP frame overhead (a few per cent). gloo's
own reduce-scatter, an all-reduce of the whole buffer, sends twice that and fails the check.
How close the collectives come to the link rate is a benchmark (``bench-collectives --json``,
results and commands in docs/BENCHMARKS.md), not a test: on a busy machine it is anything.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from overlapscope.bench.collectives import (
    IMPLEMENTATION,
    BenchConfig,
    aligned_size,
    parse_size,
    summarize,
)
from overlapscope.commands import bench_collectives
from overlapscope.errors import UserError
from overlapscope.phases import CollectiveKind
from tests.lab.support import needs_lab, root_state

REPO = Path(__file__).resolve().parents[2]
LINK_GBIT = 0.2


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1MB", 2**20), ("16MiB", 16 * 2**20), ("512KB", 512 * 2**10), ("1024", 1024), ("1G", 2**30)],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


def test_parse_size_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="cannot read size"):
        parse_size("lots")


def test_bus_factors_follow_nccl_tests() -> None:
    assert CollectiveKind.ALL_GATHER.bus_factor(4) == pytest.approx(0.75)
    assert CollectiveKind.REDUCE_SCATTER.bus_factor(4) == pytest.approx(0.75)
    row = summarize(CollectiveKind.REDUCE_SCATTER, 10**9 // 8, 4, np.array([1.0, 2.0, 3.0]), 1.0)
    assert row.algbw_gbit == pytest.approx(0.5)  # median 2 s for 1 Gbit
    assert row.busbw_gbit == pytest.approx(0.375)
    assert row.link_ratio == pytest.approx(0.375)
    assert aligned_size(1001, 2) == 1000


def _bench_args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {
        "nproc": 2,
        "link_gbit": None,
        "sizes": "1MB",
        "iters": 5,
        "warmup": 1,
        "json": None,
        "log_dir": None,
        "timeout": 600.0,
    }
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize(
    ("kw", "needles"),
    [
        ({"sizes": "0"}, ["--sizes", "'0'", "> 0"]),
        ({"sizes": "1MB,0KB"}, ["--sizes", "'0KB'"]),
        ({"sizes": "4B"}, ["--sizes", "'4B'", "at least 8 bytes on 2 ranks"]),
        ({"sizes": "lots"}, ["--sizes", "cannot read size 'lots'"]),
        ({"nproc": 0}, ["--nproc", ">= 2"]),
        ({"link_gbit": float("inf")}, ["--link-gbit", "finite"]),
        ({"link_gbit": float("nan")}, ["--link-gbit", "finite"]),
    ],
    ids=["zero", "zero-in-list", "below-one-float-per-rank", "garbage", "nproc-0", "inf", "nan"],
)
def test_config_rejects_bad_values_naming_the_flag(
    kw: dict[str, object], needles: list[str]
) -> None:
    with pytest.raises(UserError) as e:
        bench_collectives._config(_bench_args(**kw))
    for needle in needles:
        assert needle in str(e.value), str(e.value)


def test_config_keeps_aligned_positive_sizes() -> None:
    cfg = bench_collectives._config(_bench_args(sizes="1MB, 1001", nproc=2))
    assert cfg.sizes_bytes == (2**20, 1000)
    with pytest.raises(ValueError, match="--sizes"):
        BenchConfig(num_ranks=2, link_gbit=None, sizes_bytes=(0,), iters=1, warmup=0)


def test_config_output_paths_checked_before_the_benchmark(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"--json .*is a directory"):
        bench_collectives.check_outputs(_bench_args(json=str(tmp_path)))
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match=r"--log-dir .*is a file"):
        bench_collectives.check_outputs(_bench_args(log_dir=tmp_path / "f"))


def test_config_description_says_ring_as_the_code_does() -> None:
    """The caption, the JSON definitions and each row name what engine/p2p.py runs: a ring."""
    cfg = BenchConfig(num_ranks=4, link_gbit=None, sizes_bytes=(2**20,), iters=1, warmup=0)
    caption = str(bench_collectives._table(cfg, []).caption)
    texts = [caption, bench_collectives.DEFINITIONS["implementation"], *IMPLEMENTATION.values()]
    for text in texts:
        assert "ring" in text, text
        assert "every peer" not in text, text
    assert "n-1 rounds" in caption and "right neighbour" in caption


def test_config_help_is_plain_text() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "overlapscope", "bench-collectives", "--help"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "``" not in proc.stdout and "ring" in proc.stdout


def _bench(num_ranks: int, link_gbit: float, sizes: str, tmp_path: Path) -> dict[str, object]:
    out = tmp_path / f"bench-{num_ranks}.json"
    before = root_state()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "overlapscope",
            "bench-collectives",
            "--nproc",
            str(num_ranks),
            "--link-gbit",
            str(link_gbit),
            "--sizes",
            sizes,
            "--iters",
            "5",
            "--json",
            str(out),
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "busbw" in proc.stdout and "reduce_scatter" in proc.stdout  # the table
    namespaces, _ = root_state()
    assert namespaces <= before[0], "bench left namespaces behind"
    return dict(json.loads(out.read_text()))


# Frames add Ethernet/IP/TCP headers (~4.6% at a 1500-byte MTU, less with segmentation
# offload), the receiver's ACKs and the iteration's barrier: far below the 2x of an all-reduce.
WIRE_OVERHEAD = 1.15


def _check_every_byte_sent_once(result: dict[str, object], num_ranks: int) -> None:
    rows = result["rows"]
    assert isinstance(rows, list) and rows
    for row in rows:
        payload = float(row["payload_bytes_per_rank"])
        assert payload == row["size_bytes"] * (num_ranks - 1) / num_ranks
        wire = row["wire_tx_bytes_per_rank"]
        assert isinstance(wire, list) and len(wire) == num_ranks, row
        for rank, sent in enumerate(wire):
            what = f"rank {rank} sent {sent:.0f} bytes for {payload:.0f} ({row['collective']})"
            assert payload <= sent <= WIRE_OVERHEAD * payload, what


@pytest.mark.root
@pytest.mark.multirank
@needs_lab
def test_bench_cli_two_ranks_send_every_byte_once(tmp_path: Path) -> None:
    result = _bench(2, LINK_GBIT, "1MB,4MB", tmp_path)
    assert result["link_gbit"] == LINK_GBIT
    assert result["num_ranks"] == 2
    rows = result["rows"]
    assert isinstance(rows, list) and len(rows) == 4
    for row in rows:
        assert row["time_us_median"] > 0 and row["busbw_gbit_s"] > 0
        assert 0 < row["time_us_min"] <= row["time_us_median"] <= row["time_us_max"]
    _check_every_byte_sent_once(result, 2)


@pytest.mark.root
@pytest.mark.multirank
@needs_lab
def test_bench_cli_four_ranks_send_every_byte_once(tmp_path: Path) -> None:
    result = _bench(4, LINK_GBIT, "4MB", tmp_path)
    assert result["num_ranks"] == 4
    _check_every_byte_sent_once(result, 4)
