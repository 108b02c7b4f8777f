"""Shared helpers for the lab tests: the skip condition and root-namespace snapshots."""

from __future__ import annotations

import os
import shutil

import pytest

from overlapscope.lab.netns import list_links, list_namespaces


def _why_no_lab() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root: the lab creates network namespaces (CI runs as root)"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"needs iproute2: {', '.join(missing)} not on PATH"
    return None


WHY_NO_LAB = _why_no_lab()
needs_lab = pytest.mark.skipif(WHY_NO_LAB is not None, reason=WHY_NO_LAB or "")


def root_state() -> tuple[set[str], set[str]]:
    """Named network namespaces and root-namespace interfaces, for before/after checks."""
    return set(list_namespaces()), set(list_links())


def assert_torn_down(before: tuple[set[str], set[str]], lab_namespaces: list[str]) -> None:
    namespaces, links = root_state()
    assert lab_namespaces, "the lab recorded no namespaces"
    assert not set(lab_namespaces) & namespaces, f"left behind: {set(lab_namespaces) & namespaces}"
    assert namespaces <= before[0], f"new namespaces: {namespaces - before[0]}"
    assert links == before[1], f"root links changed: {links ^ before[1]}"
