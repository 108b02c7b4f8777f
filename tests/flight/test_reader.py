"""Reading Flight Recorder dumps: torch's pickle and JSON from real gloo runs, and the
refusals (a pickle that would run code, an unknown version, a damaged file)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from overlapscope.errors import UserError
from overlapscope.flight.discover import find_dumps
from overlapscope.flight.reader import KNOWN_VERSIONS, read_dump
from overlapscope.flight.table import entries_table
from tests.conftest import REPO


class _Runs:
    """Unpickling this runs a shell command (what a hostile dump would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_a_real_pickle_reads_with_its_frames_and_phases(fsdp2_profiled: Path) -> None:
    dumps, rest = find_dumps([fsdp2_profiled])
    assert [d.name for d in dumps] == ["rank_0", "rank_1"]
    assert rest == [fsdp2_profiled]  # its profiler traces are left to the trace loader
    d = read_dump(dumps[1])
    assert (d.rank, d.fmt, d.version) == (1, "pickle", KNOWN_VERSIONS[0])
    t = entries_table([d])
    assert (t["seq"].diff().dropna() == 1).all()  # every collective of the run, in order
    fsdp = t[t["framework"] == "fsdp2"]
    assert set(fsdp["phase"]) == {"ag_fwd", "ag_bwd", "rs"}
    # gloo records the issue only: no start, completion or duration
    assert (t["issue_ns"] > 0).all() and (t["end_ns"] == -1).all()
    assert t["duration_us"].isna().all()
    assert (fsdp.loc[fsdp["phase"] == "ag_fwd", "input_bytes"] > 0).all()


def test_the_json_dump_reads_like_the_pickle(tmp_path: Path) -> None:
    """torch's ``_dump_fr_trace_json`` of the same rank: the same entries (it has no
    frames, so no phase)."""
    script = tmp_path / "dump.py"
    script.write_text(
        "import sys, torch, torch.distributed as dist\n"
        "from overlapscope.flight.capture import enable\n"
        "enable(50)\n"
        "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:%s' % sys.argv[2],"
        " rank=0, world_size=1)\n"
        "dist.all_reduce(torch.ones(4)); dist.barrier()\n"
        "c = torch._C._distributed_c10d\n"
        "open(sys.argv[1] + '/rank_0', 'wb').write(c._dump_fr_trace())\n"
        "open(sys.argv[1] + '/rank0.json', 'wb').write(c._dump_fr_trace_json())\n"
    )
    from tests.conftest import free_port

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(free_port())],
        check=True, env=env, timeout=120,
    )  # fmt: skip
    dumps, _ = find_dumps([tmp_path])
    assert sorted(p.name for p in dumps) == ["rank0.json", "rank_0"]
    by_fmt = {d.fmt: entries_table([d]) for d in map(read_dump, dumps)}
    cols = ["seq", "op", "issue_ns", "input_sizes", "end_ns"]
    pk, js = by_fmt["pickle"][cols], by_fmt["json"][cols]
    assert list(pk["op"]) == ["all_reduce", "barrier"]
    assert pk.astype(str).equals(js.astype(str))


def test_a_pickle_that_would_run_a_command_is_refused_and_nothing_runs(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    evil = tmp_path / "rank_0"
    evil.write_bytes(pickle.dumps({"version": "2.10", "entries": [_Runs(marker)]}, protocol=2))
    with pytest.raises(UserError) as e:
        read_dump(evil)
    msg = str(e.value)
    assert msg.startswith(f"{evil}: refused") and "posix.system" in msg and "\n" not in msg
    assert not marker.exists()


def test_the_cli_refuses_it_in_one_line_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "comm_traces").mkdir()
    evil = tmp_path / "comm_traces" / "rank_0"
    evil.write_bytes(pickle.dumps({"version": "2.10", "entries": [_Runs(marker)]}))
    r = subprocess.run(
        [sys.executable, "-m", "overlapscope", "analyze", str(tmp_path)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )  # fmt: skip
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(evil) in lines[0] and "refused" in lines[0], r.stderr
    assert not marker.exists()


def test_an_unknown_version_is_refused_by_name(fsdp2_profiled: Path, tmp_path: Path) -> None:
    doc = pickle.loads((fsdp2_profiled / "comm_traces" / "rank_0").read_bytes())
    doc["version"] = "9.9"
    bad = tmp_path / "rank_0"
    bad.write_bytes(pickle.dumps(doc))
    with pytest.raises(UserError, match=r"rank_0: Flight Recorder dump version '9.9' is not"):
        read_dump(bad)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\x80\x02}q\x00(X\x07", "not a readable pickle"),
        (b"\x80\x04K\x01.", "not a Flight Recorder dump"),
        (b'{"comm_lib_version": "x", "entries": 3, "version": "2.10"}', "not a list of records"),
    ],
    ids=["truncated", "not-a-dict", "entries-not-a-list"],
)
def test_damaged_dumps_are_one_line_errors(tmp_path: Path, data: bytes, says: str) -> None:
    bad = tmp_path / "rank_3"
    bad.write_bytes(data)
    with pytest.raises(UserError, match=says) as e:
        read_dump(bad)
    assert str(e.value).startswith(str(bad)) and "\n" not in str(e.value)


def test_a_dump_name_without_its_rank_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "dump"
    bad.write_bytes(pickle.dumps({"version": "2.10", "entries": []}))
    with pytest.raises(UserError, match="ends with"):
        read_dump(bad)
