"""Nothing a user has is lost, and output paths are checked before any work (issue #21,
points 1 and 2): each case is what a user might type, with the one line it must get."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from overlapscope.errors import UserError
from overlapscope.outputs import fresh_name, only_ours, replace_dir
from tests.reliability.helpers import (
    assert_one_line_error,
    cli,
    copy_sample_run,
    digest,
    hidden_entries,
)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return copy_sample_run(tmp_path / "run")


# (args with {run} for the run directory, {tmp} for the test's folder; needles of the line)
OVER_INPUT = {
    "json-over-trace": (["analyze", "{run}", "--json", "{run}/rank-0.pt.trace.json.gz"], []),
    "markdown-over-manifest": (["analyze", "{run}", "--markdown", "{run}/run.json"], []),
    "csv-inside-run": (["analyze", "{run}", "--csv", "{run}/tables"], []),
    "json-into-run": (["analyze", "{run}", "--json", "{run}/report.json"], []),
    "diagnose-trace-file": (
        ["analyze", "{run}/rank-0.pt.trace.json.gz", "--json", "{run}/rank-0.pt.trace.json.gz"],
        [],
    ),
    "whatif-trace-over-run": (
        ["whatif", "{run}", "--policy", "none", "--trace", "{run}", "--force"],
        ["--trace"],
    ),
    "whatif-json-over-manifest": (
        ["whatif", "{run}", "--policy", "none", "--json", "{run}/run.json"],
        ["--json"],
    ),
    "csv-holding-run": (["analyze", "{run}", "--csv", "{tmp}"], ["--csv"]),
    "out-holding-run": (["whatif", "{run}", "--policy", "none", "--trace", "{tmp}"], ["--trace"]),
}


@pytest.mark.parametrize("case", list(OVER_INPUT), ids=list(OVER_INPUT))
def test_no_command_writes_over_its_input(
    case: str, run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args, needles = OVER_INPUT[case]
    before = digest(tmp_path)
    argv = [a.format(run=run_dir, tmp=tmp_path) for a in args]
    line = assert_one_line_error(cli(capsys, *argv), "would write over the input", *needles)
    assert str(run_dir) in line  # both paths named
    assert digest(tmp_path) == before


OUTPUT_PATHS = {
    "json-missing-parent": (["analyze", "{run}", "--json", "{tmp}/missing/sub/out.json"], ["--json", "does not exist"]),
    "json-is-a-dir": (["analyze", "{run}", "--json", "{tmp}/adir"], ["--json", "is a directory"]),
    "json-is-the-runs-parent": (["analyze", "{run}", "--json", "{tmp}"], ["--json", "is a directory"]),
    "json-under-a-file": (["analyze", "{run}", "--json", "{tmp}/afile/out.json"], ["--json", "is a file"]),
    "markdown-is-a-dir": (["analyze", "{run}", "--markdown", "{tmp}/adir"], ["--markdown", "is a directory"]),
    "csv-is-a-file": (["analyze", "{run}", "--csv", "{tmp}/afile"], ["--csv", "is a file"]),
    "run-out-under-a-file": (["run", "--out", "{tmp}/afile/x"], ["--out", "is a file"]),
    "run-out-is-a-file": (["run", "--out", "{tmp}/afile", "--force"], ["--out", "is a file"]),
    "sweep-out-is-a-file": (["sweep", "--out", "{tmp}/afile", "--force"], ["--out", "is a file"]),
    "whatif-json-is-a-dir": (["whatif", "{run}", "--policy", "none", "--json", "{tmp}/adir"], ["--json"]),
    "whatif-trace-is-a-file": (["whatif", "{run}", "--policy", "none", "--trace", "{tmp}/afile"], ["--trace"]),
    "bench-json-missing-parent": (["bench-collectives", "--json", "{tmp}/missing/b.json"], ["--json"]),
    "bench-log-dir-is-a-file": (["bench-collectives", "--log-dir", "{tmp}/afile"], ["--log-dir"]),
}  # fmt: skip


@pytest.mark.parametrize("case", list(OUTPUT_PATHS), ids=list(OUTPUT_PATHS))
def test_output_paths_checked_before_work(
    case: str, run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("the user's file\n")
    args, needles = OUTPUT_PATHS[case]
    before = digest(tmp_path)
    argv = [a.format(run=run_dir, tmp=tmp_path) for a in args]
    assert_one_line_error(cli(capsys, *argv), *needles)
    assert digest(tmp_path) == before
    assert hidden_entries(tmp_path) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere: no permission to deny")
def test_no_permission_is_one_line(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert_one_line_error(
        cli(capsys, "analyze", run_dir, "--json", locked / "o.json"), "--json", "cannot write"
    )


def _user_folder(path: Path) -> Path:
    (path / "runs").mkdir(parents=True)
    (path / "README.md").write_text("my notes\n")
    (path / "train.py").write_text("print('mine')\n")
    return path


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_force_never_replaces_a_users_folder(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _user_folder(tmp_path / "S")
    before = digest(folder)
    result = cli(capsys, command, "--out", str(folder), "--force")
    assert_one_line_error(result, "--out", "did not write", "refusing")
    assert digest(folder) == before


def test_only_ours_needs_the_marker_and_nothing_else(tmp_path: Path) -> None:
    import re

    entries = re.compile(r"run\.json|logs")
    (tmp_path / "logs").mkdir()
    assert not only_ours(tmp_path, "run.json", entries)  # no marker
    (tmp_path / "run.json").write_text("{}")
    assert only_ours(tmp_path, "run.json", entries)
    (tmp_path / "notes.txt").write_text("mine")
    assert not only_ours(tmp_path, "run.json", entries)


def test_failed_build_leaves_the_old_result_and_a_fresh_failed_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "result.txt").write_text("old")
    (tmp_path / "out.failed").mkdir()
    (tmp_path / "out.failed" / "notes.txt").write_text("the user's notes")

    def build(tmp: Path) -> None:
        (tmp / "half.txt").write_text("half")
        raise UserError("the build failed")

    with pytest.raises(UserError, match=r"out\.failed-2"):
        replace_dir(
            out, build, flag="--out", force=True, is_replaceable=lambda p: True,
            keep_on_failure=True,
        )  # fmt: skip
    assert (out / "result.txt").read_text() == "old"
    assert (tmp_path / "out.failed" / "notes.txt").read_text() == "the user's notes"
    assert (tmp_path / "out.failed-2" / "half.txt").read_text() == "half"
    assert hidden_entries(tmp_path) == []


def test_interrupted_build_leaves_the_old_result(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "result.txt").write_text("old")

    def build(tmp: Path) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        replace_dir(out, build, flag="--out", force=True, is_replaceable=lambda p: True)
    assert (out / "result.txt").read_text() == "old"
    assert hidden_entries(tmp_path) == []


def test_fresh_name_skips_existing(tmp_path: Path) -> None:
    base = tmp_path / "x.failed"
    assert fresh_name(base) == base
    base.mkdir()
    (tmp_path / "x.failed-2").write_text("")
    assert fresh_name(base) == tmp_path / "x.failed-3"


def test_a_pipe_is_written_in_place(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--json /dev/null`` or a pipe: written into, never renamed over (a file renamed over
    /dev/null replaced the device for every program on the machine, as root). A FIFO stands
    in for the device here, so that the test cannot break this machine's /dev/null."""
    import json
    import stat
    import threading

    fifo = tmp_path / "report.pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as f:  # blocks until the command opens the pipe to write
            got.append(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    result = cli(capsys, "analyze", str(run_dir), "--json", str(fifo), "--no-progress")
    reader.join(timeout=120)
    assert result.code == 0, result.err
    assert not reader.is_alive(), "nothing was written into the pipe"
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert json.loads(got[0])["run"]["world_size"] == 2
    assert hidden_entries(tmp_path) == []


def test_a_link_is_written_through(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An output path that is a link: the file it names gets the report, the link stays."""
    (tmp_path / "reports").mkdir()
    real = tmp_path / "reports" / "latest.md"
    real.write_text("last week's report\n")
    link = tmp_path / "report.md"
    link.symlink_to(real)
    result = cli(capsys, "analyze", str(run_dir), "--markdown", str(link), "--no-progress")
    assert result.code == 0, result.err
    assert link.is_symlink() and link.resolve() == real
    assert real.read_text().startswith("#") and "last week" not in real.read_text()
