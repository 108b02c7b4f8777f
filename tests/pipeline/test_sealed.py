"""Sealed files (overlapscope/sealed.py), what every cache file is: read back as written, any
change or cut found before the content is read, writers of one entry at once never in each
other's way, and what killed writers left removed."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from overlapscope.sealed import DamagedFile, atomic, dump, load, sweep, temporary_prefix

VALUE = {"figures": list(range(200)), "name": "rank 0"}


def test_a_sealed_file_reads_back(tmp_path: Path) -> None:
    dump(tmp_path / "x.pkl", VALUE)
    assert load(tmp_path / "x.pkl") == VALUE
    assert [p.name for p in tmp_path.iterdir()] == ["x.pkl"]


def test_every_cut_and_every_flipped_byte_is_found(tmp_path: Path) -> None:
    path = tmp_path / "x.pkl"
    dump(path, VALUE)
    whole = path.read_bytes()
    for size in range(len(whole)):
        path.write_bytes(whole[:size])
        with pytest.raises(DamagedFile):
            load(path)
    for i in range(len(whole)):
        changed = bytearray(whole)
        changed[i] ^= 0x01
        path.write_bytes(bytes(changed))
        with pytest.raises(DamagedFile):
            load(path)


def test_a_missing_file_is_damage_of_its_entry(tmp_path: Path) -> None:
    with pytest.raises(DamagedFile, match="missing from its entry"):
        load(tmp_path / "gone.pkl")


def test_two_writers_of_one_entry_at_once_both_finish(tmp_path: Path) -> None:
    """Two threads (a dashboard's) inside the write of one entry at the same time: each
    writes a temporary file of its own, and the entry is one of theirs, whole."""
    dest = tmp_path / "entry.pkl"
    both_writing = threading.Barrier(2, timeout=30)
    errors: list[BaseException] = []

    def write(value: bytes) -> None:
        def slow(tmp: Path) -> None:
            tmp.write_bytes(value)
            both_writing.wait()  # (the other one is between its write and its rename)

        try:
            atomic(dest, slow)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=write, args=(v,)) for v in (b"a" * 1000, b"b" * 1000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    data = dest.read_bytes()
    assert data[:1000] in (b"a" * 1000, b"b" * 1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.pkl"]


def test_a_failed_write_names_the_file_and_leaves_nothing(tmp_path: Path) -> None:
    def failing(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise OSError(28, "No space left on device", str(tmp))

    with pytest.raises(OSError, match="No space left on device") as e:
        atomic(tmp_path / "entry.pkl", failing)
    assert e.value.filename == str(tmp_path / "entry.pkl")
    assert list(tmp_path.iterdir()) == []


def test_sweep_removes_only_what_writers_that_are_gone_left(tmp_path: Path) -> None:
    script = [sys.executable, "-c", "import os; print(os.getpid())"]
    dead = int(subprocess.run(script, text=True, capture_output=True, check=True).stdout)
    host = socket.gethostname()
    names = {
        f".e.pkl.{host}-{dead}-7.tmp": False,  # its writer is gone
        f"{temporary_prefix('e.arrow')}7.tmp": True,  # ours: alive
        f".e.pkl.another-host-{dead}-7.tmp": True,  # another host's: not ours to judge
        "e.pkl": True,
    }
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    folder = tmp_path / f".perfetto.{host}-{dead}-abc.tmp"  # a dead export's parts
    folder.mkdir()
    assert sweep([tmp_path]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for n, k in names.items() if k)
