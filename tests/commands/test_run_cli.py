"""``overlapscope run``: bad input gives one line naming the cause, and nothing that looks
like a complete run is left behind."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from overlapscope.cli import build_parser
from overlapscope.config import EngineConfig
from tests.conftest import overlapscope_cmd

TINY = [
    "--layers",
    "2",
    "--dim",
    "32",
    "--heads",
    "2",
    "--seq-len",
    "16",
    "--steps",
    "3",
    "--profile-wait",
    "0",
    "--profile-warmup",
    "1",
    "--profile-active",
    "1",
]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        overlapscope_cmd(*args),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--bogus"], ["unrecognized arguments: --bogus"]),
        (["--policy", "sometimes"], ["--policy", "invalid choice"]),
        (["--nproc", "2", "--global-batch", "3"], ["--global-batch 3", "--nproc 2"]),
        (["--steps", "1"], ["--steps 1", "raise --steps"]),
        (["--limit-all-gathers", "0"], ["--limit-all-gathers", ">= 1", "leave the flag out"]),
        (["--device", "cuda"], ["--device cuda"]),
        (["--dim", "30", "--heads", "4"], ["--dim 30", "--heads 4"]),
    ],
    ids=[
        "unknown-flag",
        "bad-policy",
        "batch-not-divisible",
        "too-few-steps",
        "bad-limit",
        "no-cuda",
        "heads-not-dividing-dim",
    ],
)
def test_bad_flags_one_line(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    out = tmp_path / "run"
    proc = run_cli("run", *TINY, *args, "--out", str(out))
    assert_one_line_error(proc, *needles)
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--lr", "nan"], ["--lr", "finite number > 0"]),
        (["--lr", "inf"], ["--lr", "finite number > 0"]),
        (["--lr", "-1"], ["--lr", "finite number > 0"]),
        (["--lr", "0"], ["--lr", "finite number > 0"]),
        (["--link-gbit", "nan"], ["--link-gbit", "finite number > 0"]),
        (["--link-gbit", "inf"], ["--link-gbit", "finite number > 0"]),
        (["--link-gbit", "0"], ["--link-gbit", "finite number > 0"]),
        (["--threads-per-rank", "-1"], ["--threads-per-rank", ">= 0", "0 = auto"]),
        (["--checkpoint-units", "bogus"], ["--checkpoint-units", "'bogus'", "every-N"]),
        (["--checkpoint-units", "every-0"], ["--checkpoint-units", "every-N", "N >= 1"]),
    ],
    ids=[
        "lr-nan",
        "lr-inf",
        "lr-negative",
        "lr-zero",
        "link-nan",
        "link-inf",
        "link-zero",
        "threads-negative",
        "ckpt-bogus",
        "ckpt-every-0",
    ],
)
def test_bad_values_rejected_before_anything_is_written(
    tmp_path: Path, args: list[str], needles: list[str]
) -> None:
    """Caught at parse time, so even --dry-run (which writes config.json) writes nothing:
    NaN/inf used to reach config.json as invalid JSON."""
    out = tmp_path / "run"
    proc = run_cli("run", *TINY, *args, "--dry-run", "--out", str(out))
    assert_one_line_error(proc, *needles)
    assert not out.exists()


def test_out_that_is_a_file_is_one_line_even_with_force(tmp_path: Path) -> None:
    out = tmp_path / "foreign.json"
    out.write_text("{}")
    for extra in ([], ["--dry-run"]):
        proc = run_cli("run", *TINY, *extra, "--out", str(out), "--force")
        assert_one_line_error(proc, "--out", "is a file")
        assert out.read_text() == "{}"


def test_dry_run_threads_zero_means_auto_and_config_is_strict_json(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli(
        "run", *TINY, "--device", "cpu", "--threads-per-rank", "0", "--dry-run", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    text = (out / "config.json").read_text()

    def no_constants(c: str) -> object:
        raise AssertionError(f"config.json holds {c}, which is not JSON")

    cfg = json.loads(text, parse_constant=no_constants)
    assert cfg["threads_per_rank"] >= 1 and cfg["lr"] == 1e-3


def test_engine_config_errors_name_the_flags() -> None:
    with pytest.raises(ValueError, match=r"--limit-all-gathers 0: K must be >= 1"):
        EngineConfig(limit_all_gathers=0)
    with pytest.raises(ValueError, match=r"--checkpoint-units 'bogus': use none, all or every-N"):
        EngineConfig(checkpoint_units="bogus")


def _helps(command: str) -> dict[str, str]:
    """Each flag of ``command`` -> its help text as ``--help`` prints it."""
    parser, _ = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    p = sub.choices[command]
    fmt = p._get_formatter()
    return {
        a.option_strings[-1]: fmt._expand_help(a) if a.help else ""
        for a in p._actions
        if a.option_strings and a.help is not argparse.SUPPRESS
    }


def test_run_help_states_each_default_once() -> None:
    parser, _ = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    actions = {a.option_strings[-1]: a for a in sub.choices["run"]._actions if a.option_strings}
    helps = _helps("run")
    assert "(default: backward_pre)" in helps["--policy"]
    for flag, text in helps.items():
        action = actions[flag]
        assert "(default: None)" not in text, (flag, text)
        assert "(default: False)" not in text, (flag, text)
        assert text.count("default") <= 1, (flag, text)
        if action.required or isinstance(action, argparse._StoreTrueAction) or flag == "--help":
            assert "default" not in text, (flag, text)
        else:
            assert text.count("default") == 1, (flag, text)
    assert "0 = auto" in helps["--threads-per-rank"]


@pytest.mark.multirank
def test_existing_out_refused_kept_by_a_failed_force_then_replaced(tmp_path: Path) -> None:
    # one run shared by three checks (each run costs two torch processes)
    out = tmp_path / "run"
    ok = run_cli("run", *TINY, "--out", str(out))
    assert ok.returncode == 0, ok.stderr
    before = (out / "run.json").read_bytes()
    manifest = json.loads(before)
    assert len(manifest["losses"]) == 3
    assert "step 3/3" in ok.stdout and "traces:" in ok.stdout

    again = run_cli("run", *TINY, "--out", str(out))
    assert_one_line_error(again, "already exists", "--force")
    assert (out / "run.json").read_bytes() == before  # untouched

    # a --force re-run that fails keeps the old run
    failed = run_cli("run", *TINY, "--out", str(out), "--force", env={"OVERLAPSCOPE_FAIL_AT": "0:0"})  # fmt: skip
    assert_one_line_error(failed, "rank 0 failed")
    assert (out / "run.json").read_bytes() == before

    forced = run_cli("run", *TINY, "--seed", "1", "--out", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert json.loads((out / "run.json").read_text())["config"]["seed"] == 1


@pytest.mark.multirank
def test_failing_rank_leaves_no_complete_looking_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("run", *TINY, "--out", str(out), env={"OVERLAPSCOPE_FAIL_AT": "1:1"})
    assert_one_line_error(proc, "rank 1 failed", "injected failure", "logs:")
    assert not out.exists()
    failed = tmp_path / "run.failed"
    assert not (failed / "run.json").exists()
    assert not (failed / "rank-1.pt.trace.json.gz").exists()  # died inside its window
    assert not list(failed.glob("*.partial"))
    assert "injected failure" in (failed / "logs" / "rank-1.log").read_text()
    # no hidden staging directory is left behind either
    assert [p.name for p in tmp_path.iterdir()] == ["run.failed"]
