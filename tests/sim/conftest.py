"""Real torch FSDP1 / FSDP2 runs (2 gloo ranks, tests/trace/torch_fsdp_run.py), made once per
session for the what-if tests that read them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trace.torch_fsdp_run import make_traces


@pytest.fixture(scope="session")
def torch_fsdp_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("torch-fsdp")
    out = {}
    for kind in ("fsdp1", "fsdp2"):
        make_traces(kind, base / kind)
        out[kind] = base / kind
    return out
