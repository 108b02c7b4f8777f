"""The outputs of ``analyze``, ``diagnose`` and ``whatif`` on the shipped runs and the
shared external traces are byte for byte those main made before the analysis became one
pipeline (issue 31, point 1): digests in ``digests.json``, made as ``outputs.py`` says.
``analyze`` and ``diagnose`` run the per-rank map and the combine through the cache;
``whatif`` runs them in its process (``analysis.api.analyze``); the in-process path on the
same runs is compared in ``test_in_process.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.golden.outputs import EXTERNAL_DIR, REPO, cases, key, outputs

DIGESTS: dict[str, dict[str, str]] = json.loads(
    (Path(__file__).parent / "digests.json").read_text()
)
CASES = cases()


@pytest.mark.parametrize(("command", "path"), CASES, ids=[key(c, p) for c, p in CASES])
def test_outputs_are_byte_identical(
    command: tuple[str, ...], path: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Cold (a cache of its own: every rank parsed and reduced) and warm (read back)."""
    name = key(command, path)
    if name not in DIGESTS:
        assert path.startswith(EXTERNAL_DIR), f"no digest for {name}: run outputs.py"
        pytest.skip(f"{path}: no digest for this external trace")
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("OVERLAPSCOPE_CACHE", str(tmp_path / "cache"))
    assert outputs(command, path) == DIGESTS[name]
    assert outputs(command, path) == DIGESTS[name]


def test_every_digest_is_compared() -> None:
    """A digest whose case is gone (a shipped run renamed) would no longer guard anything;
    the external traces absent here are skipped, not lost."""
    if not (REPO / EXTERNAL_DIR).is_dir():
        pytest.skip(f"shared external traces absent ({REPO / EXTERNAL_DIR})")
    assert set(DIGESTS) == {key(c, p) for c, p in CASES}
