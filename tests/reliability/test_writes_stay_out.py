"""No command writes into the repository or into the folder it reads (issue 41, point 7).

The main commands run, from the repository root, on a copy of a sample run (and ``run
--dry-run``, which writes the run's configuration), every output named in a temporary folder
and the cache left at its default (``$XDG_CACHE_HOME``, here a temporary folder too): afterwards the repository tree and the input copy are as they were,
path for path, size for size, modification time for modification time; ``git status`` says
the same. The tracked tree holds no cache files (``cold/``, an old cache layout, was committed
once) and ``.gitignore`` keeps them out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO, free_port

SAMPLE = REPO / "traces" / "backward_pre"
# Never compared: git's own store, and the folders other tools keep (git ignores them all).
SKIPPED = {".git", "__pycache__", ".venv", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
# File names a cache writes (ours: Arrow IPC, pickles; Python's bytecode).
CACHE_SUFFIXES = (".arrow", ".pkl", ".pickle", ".pyc", ".parquet")

Snapshot = dict[str, tuple[int, int]]


def _walk(root: Path) -> Iterator[Path]:
    for entry in os.scandir(root):
        if entry.name in SKIPPED:
            continue
        path = Path(entry.path)
        yield path
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(path)


def snapshot(root: Path) -> Snapshot:
    """Every path under ``root`` (relative) -> (size, mtime in ns)."""
    found = {}
    for path in _walk(root):
        st = path.lstat()
        found[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return found


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    made = [f"created {p}" for p in sorted(after.keys() - before.keys())]
    gone = [f"removed {p}" for p in sorted(before.keys() - after.keys())]
    changed = [
        f"changed {p}" for p in sorted(before.keys() & after.keys()) if before[p] != after[p]
    ]
    return made + gone + changed


def git_status() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVERLAPSCOPE_CACHE")}
    # The default cache (no --cache): $XDG_CACHE_HOME/overlapscope. Bytecode is Python's, not
    # the command's: none is written, so that a first import leaves nothing behind either.
    env.update(XDG_CACHE_HOME=str(home / "xdg"), HOME=str(home), PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = str(REPO)
    return env


def _overlapscope(env: dict[str, str], *argv: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "overlapscope", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (argv, proc.stderr[-2000:])


def _dashboard(env: dict[str, str], run: Path) -> None:
    """``overlapscope dashboard RUN``: served, its page fetched once, then stopped."""
    port = free_port()
    argv = [sys.executable, "-m", "overlapscope", "dashboard", str(run), "--port", str(port)]
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # its one line once the run is analysed and it serves
        assert "overlapscope dashboard: 1 run(s)" in line, (line, proc.stderr)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
                    assert r.status == 200
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def test_commands_write_only_where_they_are_told(tmp_path: Path) -> None:
    run = tmp_path / "input" / SAMPLE.name
    shutil.copytree(SAMPLE, run)
    out = tmp_path / "out"
    out.mkdir()
    env = _env(tmp_path)
    repo_before, input_before, status_before = snapshot(REPO), snapshot(run.parent), git_status()

    _overlapscope(
        env,
        "analyze",
        str(run),
        "--no-progress",
        "--json",
        str(out / "report.json"),
        "--csv",
        str(out / "csv"),
        "--markdown",
        str(out / "report.md"),
        "--perfetto",
        str(out / "run.perfetto.json.gz"),
    )
    _overlapscope(env, "diagnose", str(run), "--no-progress")
    _overlapscope(
        env, "whatif", str(run), "--policy", "none", "--json", str(out / "whatif.json"),
        "--trace", str(out / "predicted"),
    )  # fmt: skip
    _dashboard(env, run)
    _overlapscope(env, "run", "--dry-run", "--device", "cpu", "--out", str(out / "run"))

    assert changes(repo_before, snapshot(REPO)) == [], "a command wrote into the repository"
    assert git_status() == status_before
    assert changes(input_before, snapshot(run.parent)) == [], "a command wrote into its input"
    # ... and it did write where it was told, and its cache where the default puts it.
    assert {p.name for p in out.iterdir()} == {
        "report.json", "csv", "report.md", "run.perfetto.json.gz", "whatif.json", "predicted", "run",
    }  # fmt: skip
    assert any((tmp_path / "xdg" / "overlapscope").iterdir())


def test_snapshot_sees_a_write(tmp_path: Path) -> None:
    """The comparison above can fail: a file made, one grown, one touched, one removed."""
    for name in ("a", "b", "c"):
        (tmp_path / name).write_text(name)
    before = snapshot(tmp_path)
    (tmp_path / "new").mkdir()
    (tmp_path / "a").write_text("aa")
    os.utime(tmp_path / "b", ns=(0, 0))
    (tmp_path / "c").unlink()
    assert changes(before, snapshot(tmp_path)) == [
        "created new", "removed c", "changed a", "changed b",
    ]  # fmt: skip


def test_no_cache_file_is_tracked_and_gitignore_keeps_them_out() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    cached = [p for p in tracked if p.endswith(CACHE_SUFFIXES) or "__pycache__/" in p]
    assert cached == [], "cache files are committed"
    assert not (REPO / "cold").exists()
    probes = [".venv", "x/__pycache__/m.cpython-312.pyc", ".pytest_cache/v", ".mypy_cache/x",
              ".ruff_cache/x", ".hypothesis/x", ".cache/overlapscope/x"]  # fmt: skip
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *probes],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert ignored == probes
