"""A failing ``sweep --force`` leaves the previous sweep as it was and keeps what it wrote
in a fresh ``S.failed-N``, never over the user's notes in an earlier ``S.failed``
(issue #21, point 1). One real, tiny, failing sweep."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.helpers import TINY_RUN, digest, env_with_repo, hidden_entries


@pytest.mark.multirank
def test_failed_sweep_keeps_the_old_one_and_every_failed_folder(tmp_path: Path) -> None:
    sweep = tmp_path / "S"
    (sweep / "runs").mkdir(parents=True)  # a previous sweep: only files a sweep writes
    (sweep / "summary.json").write_text(json.dumps({"rows": []}))
    (sweep / "summary.md").write_text("the previous results\n")
    notes = tmp_path / "S.failed"
    notes.mkdir()
    (notes / "NOTES.md").write_text("why the last one failed, by the user\n")
    before = digest(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "overlapscope", "sweep", "--policies", "none", "--repeats", "1",
         *TINY_RUN, "--steps", "2", "--out", str(sweep), "--force"],
        env={**env_with_repo(), "OVERLAPSCOPE_FAIL_AT": "1:0"},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("overlapscope: error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "S.failed-2" in errors[0]
    assert {k: digest(tmp_path)[k] for k in before} == before  # old sweep and notes intact
    kept = tmp_path / "S.failed-2"
    assert list(kept.rglob("rank-1.log")), "the failed sweep's logs are kept"
    assert hidden_entries(tmp_path) == []


@pytest.mark.multirank
def test_failed_run_never_deletes_an_earlier_failed_folder(tmp_path: Path) -> None:
    notes = tmp_path / "X.failed"
    notes.mkdir()
    (notes / "NOTES.md").write_text("the user's notes\n")
    proc = subprocess.run(
        [sys.executable, "-m", "overlapscope", "run", *TINY_RUN, "--steps", "2",
         "--out", str(tmp_path / "X")],
        env={**env_with_repo(), "OVERLAPSCOPE_FAIL_AT": "0:0"},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "X.failed-2" in proc.stderr
    assert (notes / "NOTES.md").read_text() == "the user's notes\n"
    assert (tmp_path / "X.failed-2" / "logs" / "rank-0.log").is_file()
    assert not (tmp_path / "X").exists()
    assert hidden_entries(tmp_path) == []
