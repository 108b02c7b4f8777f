"""Run discovery: which runs the app was started with, their keys, labels and default pair.

A run is a directory with a ``run.json`` (or trace files) below a path the app was started
with; each becomes one :class:`RunSource` whose ``key`` is all the browser ever sends. Used by
:class:`~dashboards.data.RunRegistry` (and re-exported from :mod:`dashboards.data`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from overlapscope.config import RunConfig
from overlapscope.errors import UserError
from overlapscope.manifest import RUN_JSON, RunManifest, config_label
from overlapscope.manifest import read_manifest as read_checked


@dataclass(frozen=True, slots=True)
class RunSource:
    """One run the dashboard may show: ``key`` is all the browser ever sends back.

    ``workload``: what must match for two runs to compare policies (the run.json config but
    the prefetch configuration, steps and seed), as text; None without a run.json."""

    key: str
    path: Path
    label: str
    policy: str | None
    workload: str | None = None
    config: str | None = None  # policy[+fwd][+limit=K], as the sweep labels configurations


def read_manifest(run_dir: Path) -> RunManifest | None:
    """The run's manifest; None without one or where it is damaged (loading the run then
    shows the manifest's one-line error in the run's panel)."""
    try:
        return read_checked(run_dir)
    except UserError:
        return None


def _policy(m: RunManifest | None) -> str | None:
    return m.engine.policy.value if m and m.engine else None


def _config_label(m: RunManifest | None) -> str | None:
    return config_label(m.engine) if m and m.engine else None


# run.json config fields that do not change what one step of the workload costs, and the
# engine fields a policy comparison varies.
NOT_WORKLOAD = ("steps", "window", "seed", "lr")
SCHEDULE = ("policy", "forward_prefetch", "limit_all_gathers")


def workload_fields(config: RunConfig) -> dict[str, Any]:
    """A run's config as flat ``section.field`` items, without what is not the workload
    (steps, seed, ...) nor the prefetch configuration; the link rate is kept."""
    out: dict[str, Any] = {}
    for k, v in config.to_dict().items():
        if k in NOT_WORKLOAD:
            continue
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in v.items() if kk not in SCHEDULE})
        else:
            out[k] = v
    return out


def _workload(m: RunManifest | None) -> str | None:
    if m is None or m.config is None or m.predicted is not None:
        return None
    return json.dumps(workload_fields(m.config), sort_keys=True)


def _run_dirs(root: Path) -> list[Path]:
    """``root`` itself when it is a run (or a trace file); else every run directory below it."""
    if root.is_file() or (root / RUN_JSON).is_file():
        return [root]
    found = sorted(p.parent for p in root.rglob(RUN_JSON))
    # A directory of bare traces (no run.json anywhere) is one run.
    if not found and any(root.glob("*.json*")):
        return [root]
    return found


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


def discover_runs(paths: Sequence[Path]) -> list[RunSource]:
    """The runs under ``paths`` (run directories, trace files, or folders holding runs).

    Raises ``UserError`` naming a path that does not exist or holds no run.
    """
    runs: list[RunSource] = []
    keys: set[str] = set()
    for root in paths:
        if not root.exists():
            raise UserError(f"{root}: no such run directory")
        dirs = _run_dirs(root)
        if not dirs:
            raise UserError(f"{root}: no run found (no run.json or trace files below it)")
        for d in dirs:
            rel = d.relative_to(root) if d != root and root.is_dir() else Path(d.name)
            label = rel.as_posix()
            key = _slug(label)
            n = 2
            while key in keys:
                key, n = f"{_slug(label)}-{n}", n + 1
            keys.add(key)
            manifest = read_manifest(d) if d.is_dir() else None
            runs.append(
                RunSource(
                    key=key,
                    path=d.resolve(),
                    label=label,
                    policy=_policy(manifest),
                    workload=_workload(manifest),
                    config=_config_label(manifest),
                )
            )
    return runs


def default_pair(runs: Sequence[RunSource]) -> tuple[str | None, str | None]:
    """Serial (policy ``none``) vs pipelined (``backward_pre`` first) when both exist, of
    the same workload and link when such a pair exists."""
    if not runs:
        return None, None
    for serial_run in (r for r in runs if r.policy == "none" and r.workload is not None):
        same = [r for r in runs if r.workload == serial_run.workload and r is not serial_run]
        pick = next((r for r in same if r.policy == "backward_pre"), None)
        pick = pick or next((r for r in same if r.policy not in (None, "none")), None)
        if pick is not None:
            return serial_run.key, pick.key
    serial = next((r.key for r in runs if r.policy == "none"), None)
    pipelined = next((r.key for r in runs if r.policy == "backward_pre"), None)
    pipelined = pipelined or next((r.key for r in runs if r.policy not in (None, "none")), None)
    if serial and pipelined:
        return serial, pipelined
    first = runs[0].key
    second = runs[1].key if len(runs) > 1 else None
    return first, second
