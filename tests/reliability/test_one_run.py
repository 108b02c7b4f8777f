"""A run's ranks belong to one run (issue #32, point 2): every trace ``overlapscope run``
writes carries the run's stamp and ``run.json`` lists each; a rank file from elsewhere is
refused in one line naming it (left out with a warning under ``--allow-missing-ranks``);
traces of other tools are checked by their steps, their start times and their collectives'
sequence numbers. Real runs: two tiny ``overlapscope run`` runs, two torch FSDP2 runs, the
shipped samples."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from overlapscope.trace.naming.files import RUN_STAMP_KEY, trace_name
from overlapscope.trace.run.loader import load_run
from tests.conftest import REPO, make_runs
from tests.reliability.helpers import TINY_RUN, assert_one_line_error, cli

SAMPLES = REPO / "traces"
COMMANDS = {
    "analyze": ["analyze"],
    "diagnose": ["diagnose"],
    "whatif": ["whatif", "--policy", "backward_pre"],  # (RUN_DIR goes after the name)
}


def _argv(command: str, run: Path, *extra: str) -> list[str]:
    name, *flags = COMMANDS[command]
    return [name, str(run), *flags, *extra]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two tiny real runs (2 gloo ranks each) of different seeds."""
    common = [*TINY_RUN, "--steps", "2"]
    return make_runs(tmp_path_factory.mktemp("two-runs"), common,
                     {"a": ["--seed", "1"], "b": ["--seed", "2"]})  # fmt: skip


def _header(path: Path) -> dict[str, object]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return {k: v for k, v in doc.items() if k != "traceEvents"}


@pytest.mark.multirank
def test_each_trace_carries_the_runs_stamp_and_run_json_lists_them(two_runs):
    run = two_runs["a"]
    manifest = json.loads((run / "run.json").read_text())
    run_id = manifest["run_id"]
    assert (
        len(run_id) == 32
        and run_id != json.loads((two_runs["b"] / "run.json").read_text())["run_id"]
    )
    assert manifest["trace_stamps"] == [{"run_id": run_id, "rank": r} for r in (0, 1)]
    for rank in (0, 1):
        assert _header(run / trace_name(rank))[RUN_STAMP_KEY] == {"run_id": run_id, "rank": rank}
    assert not [w for w in load_run(run).warnings if "left out" in w or "disagree" in w]


def _copy_over(tmp_path: Path, into: Path, source: Path, rank: int = 1) -> Path:
    run = tmp_path / "mixed"
    shutil.copytree(into, run)
    shutil.copy(source / trace_name(rank), run / trace_name(rank))
    return run


@pytest.mark.multirank
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_rank_copied_from_another_run_is_refused_naming_it(two_runs, tmp_path, capsys, command):
    run = _copy_over(tmp_path, two_runs["a"], two_runs["b"])
    line = assert_one_line_error(cli(capsys, *_argv(command, run)), str(run / trace_name(1)))
    b_id = json.loads((two_runs["b"] / "run.json").read_text())["run_id"]
    assert f"is rank 1 of run {b_id[:12]}, not of this run" in line


@pytest.mark.multirank
def test_a_foreign_rank_is_left_out_with_a_warning_when_asked(two_runs, tmp_path):
    run = _copy_over(tmp_path, two_runs["a"], two_runs["b"])
    loaded = load_run(run, allow_missing_ranks=True)
    assert [r.rank for r in loaded.ranks] == [0]
    assert any(
        w.startswith(f"left out {run / trace_name(1)}: is rank 1 of run") for w in loaded.warnings
    )
    assert any("1 of 2 ranks missing: 1" in w for w in loaded.warnings)


@pytest.mark.multirank
def test_a_trace_without_a_stamp_in_a_stamped_run_is_refused(two_runs, tmp_path, capsys):
    run = _copy_over(tmp_path, two_runs["a"], SAMPLES / "none")
    assert_one_line_error(cli(capsys, "analyze", run), trace_name(1), "carries no run stamp")


@pytest.mark.multirank
def test_one_runs_ranks_renamed_are_refused(two_runs, tmp_path, capsys):
    run = tmp_path / "renamed"
    shutil.copytree(two_runs["a"], run)
    (run / trace_name(0)).rename(run / "tmp")
    (run / trace_name(1)).rename(run / trace_name(0))
    (run / "tmp").rename(run / trace_name(1))
    line = assert_one_line_error(cli(capsys, "analyze", run), trace_name(0))
    assert "holds rank 1, but run.json lists it as rank 0: the run's files were renamed" in line


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_shipped_samples_rank_copied_over_another_is_refused(tmp_path, capsys, command):
    """The samples carry no stamp (recorded before it): their start times tell."""
    run = _copy_over(tmp_path, SAMPLES / "backward_pre", SAMPLES / "none")
    line = assert_one_line_error(cli(capsys, *_argv(command, run)), str(run / trace_name(1)))
    assert "step 2 starts" in line and "recorded at another time, not in this job" in line


def test_the_shipped_samples_ranks_renamed_are_refused(tmp_path, capsys):
    run = tmp_path / "renamed"
    shutil.copytree(SAMPLES / "none", run)
    (run / trace_name(0)).rename(run / "tmp")
    (run / trace_name(1)).rename(run / trace_name(0))
    (run / "tmp").rename(run / trace_name(1))
    line = assert_one_line_error(cli(capsys, "analyze", run), trace_name(0))
    assert "holds rank 1 (distributedInfo), but its name says rank 0" in line


@pytest.fixture(scope="module")
def second_fsdp2_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fsdp2-second")
    script = REPO / "tests" / "trace" / "torch_fsdp_run.py"
    subprocess.run([sys.executable, str(script), "fsdp2", str(out)], check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    return out


@pytest.mark.multirank
def test_two_torch_fsdp_runs_mixed_are_refused(fsdp2_run, second_fsdp2_run, tmp_path, capsys):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(fsdp2_run / "rank-0.json", mixed / "rank-0.json")
    shutil.copy(second_fsdp2_run / "rank-1.json", mixed / "rank-1.json")
    assert load_run(fsdp2_run).world_size == 2  # each run alone is one job
    assert load_run(second_fsdp2_run).world_size == 2
    line = assert_one_line_error(cli(capsys, "analyze", mixed), "rank-1.json")
    assert "step 1 starts" in line and "recorded at another time" in line
    loaded = load_run(mixed, allow_missing_ranks=True)
    assert [r.rank for r in loaded.ranks] == [0]


@pytest.mark.multirank
def test_rerank_copies_of_a_stamped_run_leave_the_stamp_out(two_runs, tmp_path):
    """Benchmarks' many-rank copies (cluster/synth.py) are no ranks of the stamped run."""
    from overlapscope.cluster.synth import rerank_copies

    rerank_copies(two_runs["a"], 4, tmp_path / "r4")
    assert RUN_STAMP_KEY not in _header(tmp_path / "r4" / trace_name(3))
    assert [r.rank for r in load_run(tmp_path / "r4").ranks] == [0, 1, 2, 3]
