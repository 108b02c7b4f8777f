"""Faults on the cache (issue 40 point 5): each gives the right answer or a one-line error, and
the next run heals. Analyses are real ``overlapscope analyze`` commands (in this process, or a
process of their own where it is killed, limited or run beside another); the right answer is
the report of the same run analysed with ``--no-cache``, byte for byte."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from overlapscope.sealed import DamagedFile, payload_size
from tests.conftest import REPO, overlapscope_cmd
from tests.reliability.helpers import Outcome, assert_one_line_error, cli

RUN = REPO / "traces" / "backward_pre"  # 2 ranks: every kind of entry, about 1 s


def analyze_args(cache: Path, out: Path) -> list[str]:
    return ["analyze", str(RUN), "--cache", str(cache), "--json", str(out), "--no-progress"]


@pytest.fixture(scope="module")
def right_answer(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    out = tmp_path_factory.mktemp("right") / "r.json"
    proc = subprocess.run(
        overlapscope_cmd("analyze", str(RUN), "--no-cache", "--json", str(out), "--no-progress"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return out.read_bytes()


@pytest.fixture(scope="module")
def full_cache(tmp_path_factory: pytest.TempPathFactory, right_answer: bytes) -> Path:
    """A cache holding every entry of the run's analysis (copied by the tests that damage it)."""
    cache = tmp_path_factory.mktemp("full") / "cache"
    out = cache.parent / "r.json"
    proc = subprocess.run(
        overlapscope_cmd(*analyze_args(cache, out)), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and out.read_bytes() == right_answer, proc.stderr
    return cache


def every_file_whole(cache: Path) -> None:
    """No temporary file left, and every file of the cache sealed whole."""
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert files and not [p for p in files if p.name.endswith(".tmp")]
    for p in files:
        payload_size(p.read_bytes(), p)  # (raises DamagedFile)


def heals(capsys: pytest.CaptureFixture[str], cache: Path, right: bytes, tmp: Path) -> None:
    """The next run: the right answer, nothing to say, every file whole."""
    out = tmp / "next.json"
    result = cli(capsys, *analyze_args(cache, out))
    assert (result.code, result.err) == (0, ""), result
    assert out.read_bytes() == right
    every_file_whole(cache)


def test_two_analyses_at_once_share_a_cache(
    tmp_path: Path, right_answer: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    outs = [tmp_path / f"{i}.json" for i in range(2)]
    procs = [
        subprocess.Popen(
            overlapscope_cmd(*analyze_args(cache, out)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for out in outs
    ]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    # each whole: no half file seen (which its seal would have shown, with a line)
    assert [(p.returncode, e) for p, e in zip(procs, errs, strict=True)] == [(0, "")] * 2
    assert [o.read_bytes() for o in outs] == [right_answer] * 2
    heals(capsys, cache, right_answer, tmp_path)


# Runs ``overlapscope ARGS`` and dies by SIGKILL halfway through the first file whose name
# matches PATTERN: the file is cut at half its length, unsealed, under its temporary name.
KILLED_MID_WRITE = """
import os, re, signal, sys
import overlapscope.sealed as sealed
pattern, real = re.compile(sys.argv[1]), sealed._seal
def dying(tmp):
    if pattern.search(tmp.name):
        os.truncate(tmp, tmp.stat().st_size // 2)
        os.kill(os.getpid(), signal.SIGKILL)
    real(tmp)
sealed._seal = dying
from overlapscope.cli import main
sys.exit(main(sys.argv[2:]))
"""

# Every kind of file the analysis writes, in the order it writes them (the pattern of its name)
ENTRIES = {
    "events": r"^\.rank-1\.pt\.trace\.json\.gz-\w+\.arrow\.",
    "meta": r"^\.rank-1\.pt\.trace\.json\.gz-\w+\.meta\.pkl\.",
    "figures": r"^\.path\.arrow\.",
    "summary": r"^\.summary\.pkl\.",
    "step path": r"^\.step-3\.pkl\.",
    "run path": r"^\.path-\w+\.pkl\.",
    "result": r"^\.result-\w+\.pkl\.",
}


@pytest.mark.parametrize("entry", ENTRIES)
def test_killed_mid_write_then_run_again(
    entry: str, tmp_path: Path, right_answer: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    code = [sys.executable, "-c", KILLED_MID_WRITE, ENTRIES[entry]]
    proc = subprocess.run(
        [*code, *analyze_args(cache, tmp_path / "killed.json")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = [p for p in cache.rglob("*.tmp") if re.search(ENTRIES[entry], p.name)]
    assert len(left) == 1 and left[0].stat().st_size > 0  # it died mid-write
    heals(capsys, cache, right_answer, tmp_path)  # (its temporary file swept)


# Each kind of file, and what must go for the analysis to read it (what lies above it).
READ_BELOW = {
    "events": ("*.arrow", ["result-*", "path-*", "*.sum-*"]),
    "meta": ("*.meta.pkl", ["result-*"]),
    "figures": ("*.sum-*/path.arrow", ["result-*", "path-*"]),
    "summary": ("*.sum-*/summary.pkl", ["result-*"]),
    "step path": ("path-*/step-3.pkl", ["result-*", "path-*.pkl"]),
    "run path": ("path-*.pkl", ["result-*"]),
    "result": ("result-*.pkl", []),
}
WHY = {
    "truncated": "no seal at its end: cut short, or not written by overlapscope",
    "flipped": "its checksum does not match: changed since it was written",
}


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:  # a few bits flipped in the middle of its content
        for i in range(len(data) // 3, len(data) // 3 + 4):
            data[i] ^= 0x10
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncated", "flipped"])
@pytest.mark.parametrize("entry", READ_BELOW)
def test_a_damaged_cache_file_is_made_again_with_a_line(
    entry: str,
    how: str,
    tmp_path: Path,
    full_cache: Path,
    right_answer: bytes,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(full_cache, cache)
    pattern, above = READ_BELOW[entry]
    for gone in above:
        for p in cache.glob(gone):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    damaged = sorted(cache.glob(pattern))[0]
    _damage(damaged, how)
    with pytest.raises(DamagedFile):
        payload_size(damaged.read_bytes(), damaged)
    out = tmp_path / "r.json"
    result = cli(capsys, *analyze_args(cache, out))
    assert result.code == 0 and out.read_bytes() == right_answer, result
    assert result.err.splitlines() == [
        f"warning: {damaged}: a damaged cache file ({WHY[how]}); made again"
    ]
    heals(capsys, cache, right_answer, tmp_path)


def _as_root_mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here ({proc.stderr.strip()})")


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    """The folders a test mounts on (root only), unmounted at its end."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount (a read-only or a full file system)")
    done: list[Path] = []
    yield done
    for folder in reversed(done):
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=60)


def _read_only(folder: Path, mounts: list[Path]) -> None:
    """``folder`` read-only as it is, contents kept (root: a read-only bind mount of it on
    itself, as a read-only share is; root ignores mode bits)."""
    _as_root_mount("--bind", str(folder), str(folder))
    mounts.append(folder)
    _as_root_mount("-o", "remount,bind,ro", str(folder))


def test_a_read_only_cache_folder_given_is_one_line(
    tmp_path: Path,
    full_cache: Path,
    right_answer: bytes,
    capsys: pytest.CaptureFixture[str],
    mounts: list[Path],
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(full_cache, cache)
    _read_only(cache, mounts)
    result = cli(capsys, *analyze_args(cache, tmp_path / "r.json"))
    assert_one_line_error(result, str(cache), "not writable", "--cache DIR")
    subprocess.run(["umount", str(cache)], check=True, timeout=60)
    mounts.remove(cache)
    heals(capsys, cache, right_answer, tmp_path)


def test_a_read_only_default_cache_is_a_warning(
    tmp_path: Path,
    full_cache: Path,
    right_answer: bytes,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    mounts: list[Path],
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(full_cache, cache)
    _read_only(cache, mounts)
    monkeypatch.setenv("OVERLAPSCOPE_CACHE", str(cache))
    out = tmp_path / "r.json"
    result = cli(capsys, "analyze", str(RUN), "--json", str(out), "--no-progress")
    assert result.code == 0 and out.read_bytes() == right_answer
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"warning: {cache}: ")
    assert "analysed without it" in lines[0]


def test_a_full_disk_while_writing_is_one_line(
    tmp_path: Path, right_answer: bytes, capsys: pytest.CaptureFixture[str], mounts: list[Path]
) -> None:
    """A cache on a file system of 160 KiB: the first rank's events (~100 KiB) fit, the
    second's do not."""
    cache = tmp_path / "cache"
    cache.mkdir()
    _as_root_mount("-t", "tmpfs", "-o", "size=160k", "tmpfs", str(cache))
    mounts.append(cache)
    result = cli(capsys, *analyze_args(cache, tmp_path / "r.json"))
    line = assert_one_line_error(result, "No space left on device", "free space")
    assert re.search(rf"error: {re.escape(str(cache))}/\S+: ", line), line  # names the file
    every_file_whole(cache)  # what it kept is whole
    _as_root_mount("-o", "remount,size=64m", str(cache))
    heals(capsys, cache, right_answer, tmp_path)


# ``overlapscope ARGS`` under a file-size limit (RLIMIT_FSIZE, KiB in argv[1]).
SIZE_LIMITED = """
import resource, sys
limit = int(sys.argv[1]) * 1024
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from overlapscope.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_a_file_size_limit_while_writing_is_one_line(
    tmp_path: Path, right_answer: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same without root: every file past 64 KiB (the events' are ~100 KiB) fails."""
    cache = tmp_path / "cache"
    proc = subprocess.run(
        [sys.executable, "-c", SIZE_LIMITED, "64", *analyze_args(cache, tmp_path / "r.json")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = assert_one_line_error(Outcome(proc.returncode, proc.stdout, proc.stderr))
    assert re.search(rf"error: {re.escape(str(cache))}/\S+\.arrow: File too large", line), line
    assert not list(cache.rglob("*.tmp"))
    heals(capsys, cache, right_answer, tmp_path)
