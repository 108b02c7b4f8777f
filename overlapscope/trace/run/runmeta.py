"""What a run directory's manifest (``run.json``, read by :mod:`overlapscope.manifest`) says
about its traces: which files are the run's, and whether the run is complete."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from overlapscope.errors import UserError
from overlapscope.manifest import RUN_JSON, RunManifest


def listed_traces(
    run_dir: Path, manifest: RunManifest | None, strict: bool, allow_flag: str,
    warnings: list[str],
) -> list[Path] | None:  # fmt: skip
    """The trace files ``run.json`` lists (None: it lists none). A listed file that is
    missing is a missing rank: an error, or with ``strict=False`` a warning and the rest."""
    if manifest is None or not manifest.traces:
        return None
    listed = [run_dir / n for n in manifest.traces]
    absent = [p for p in listed if not p.is_file()]
    if absent and strict:
        raise UserError(
            f"{absent[0]}: missing ({RUN_JSON} lists it); copy the run again, or pass "
            f"{allow_flag} to analyse the {len(listed) - len(absent)} ranks present"
        )
    warnings.extend(f"{p}: missing ({RUN_JSON} lists it)" for p in absent)
    return [p for p in listed if p.is_file()]


def run_state(
    manifests: Iterable[tuple[Path, RunManifest | None]], warnings: list[str]
) -> tuple[RunManifest | None, bool]:
    """(the run's manifest, whether it is a completed overlapscope run) from its directories."""
    manifest: RunManifest | None = None
    completed = False
    for d, loaded in manifests:
        partial = sorted(d.glob("*.partial"))
        if loaded is not None:
            manifest = loaded
            completed = not partial
            pred = loaded.predicted
            if pred is not None:
                warnings.append(
                    f"{d}: a what-if prediction ({pred.scenario} from {pred.source}), "
                    "not a measured run"
                )
        if partial:
            warnings.append(
                f"{d}: {partial[0].name} present: not a completed overlapscope run; "
                "analysed as plain traces"
            )
    return manifest, completed
