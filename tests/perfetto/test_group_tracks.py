"""``analyze --perfetto`` on a job of several process groups (issue 44 point 8): each
rank's exposed communication is one track per phase and group."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from overlapscope.cli import main
from tests.conftest import REPO


def test_exposed_tracks_per_group(tmp_path: Path) -> None:
    out = tmp_path / "hsdp.perfetto.json.gz"
    rc = main(["analyze", str(REPO / "traces" / "parallel-hsdp"), "--perfetto", str(out),
               "--no-progress", "--no-cache"])  # fmt: skip
    assert rc == 0
    doc = json.loads(gzip.decompress(out.read_bytes()))
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    pid_rank = {
        e["pid"]: e["args"]["rank"] for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name" and "rank" in e["args"]
    }  # fmt: skip
    tracks = {
        (pid_rank.get(e["pid"]), e["args"]["name"].removeprefix("overlapscope · "))
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
        and "exposed" in e["args"]["name"]
    }  # fmt: skip
    assert {t for r, t in tracks if r == 1} == {
        "exposed ag_fwd · mesh_shard[0,1]", "exposed ag_bwd · mesh_shard[0,1]",
        "exposed rs · mesh_shard[0,1]", "exposed ar_rep · mesh_replicate[1,3]",
    }  # fmt: skip
