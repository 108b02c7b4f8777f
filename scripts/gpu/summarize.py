"""Print one short table of a GPU check's results (the last thing the check prints).

    python scripts/gpu/summarize.py OUT

Reads what ``scripts/gpu-check-engine.sh`` or ``scripts/gpu-check-torch-fsdp.sh`` wrote into
OUT: ``environment.txt``, ``checks/*.json``, each analysed folder's ``<dir>.analysis.json``
and ``<dir>.analyze.txt``, and run logs (for ``OVERLAPSCOPE_SYNC_DEBUG=warn``'s warnings).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

SYNC_WARNING = "synchronizing CUDA operation"


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _step_ms(run: Path) -> str:
    manifest = _load(run / "run.json")
    if manifest:
        prof = manifest.get("profiled_steps") or []
        times = [t[s] for t in manifest.get("step_time_us", []) for s in prof if s < len(t)]
        return f"{statistics.median(times) / 1e3:.1f}" if times else "-"
    captures = _load(run.parent / "captures.json") or {}
    meta = captures.get("configs", {}).get(run.name, {})
    times = [meta["step_time_us"][s] for s in meta.get("profiled_steps", [])]
    return f"{statistics.median(times) / 1e3:.1f}" if times else "-"


def _sync_warnings(run: Path) -> str:
    logs = list((run / "logs").glob("rank-*.log"))
    if not logs:
        return "-"
    return str(sum(p.read_text(errors="replace").count(SYNC_WARNING) for p in logs))


def _analysis_row(run: Path) -> list[str]:
    doc = _load(run.with_name(run.name + ".analysis.json"))
    txt = run.with_name(run.name + ".analyze.txt")
    if doc is None:
        last = txt.read_text(errors="replace").strip().splitlines()[-2:] if txt.exists() else []
        return ["analysis failed: " + " | ".join(last)[:110]]
    rows = []
    for r in doc.get("ranks", []):
        per = r["step_time_per_step_us"] or 1.0
        rows.append(
            f"r{r['rank']} step {per / 1e3:.2f} ms: compute {r['compute_per_step_us'] / per:.0%}"
            f" exposed comm {r['exposed_comm_per_step_us'] / per:.0%}"
            f" idle {r['idle_per_step_us'] / per:.0%} overlap {r['overlap_pct'] or 0:.1f}%"
        )
    hta = doc.get("hta", {}).get("status", "-")
    return [*rows, f"HTA: {hta}"]


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    print(f"== summary of {out}")
    env = out / "environment.txt"
    if env.exists():
        print(env.read_text().rstrip())
    parity = _load(out / "checks" / "parity.json")
    if parity:
        bad = [r for r in parity["rows"] if not r["ok"]]
        print(f"parity + sync checks: {len(parity['rows']) - len(bad)}/{len(parity['rows'])} ok")
        for r in bad:
            print(f"  FAILED {r}")
    overhead = _load(out / "checks" / "overhead.json")
    for got in (overhead or {}).get("by_batch", []):
        med = got["median_step_us"]
        print(
            f"instrumentation overhead at batch {got['model']['batch']}: "
            f"{got['overhead_pct']:+.2f}% ({med['instrumented'] / 1e3:.3f} vs "
            f"{med['no-instrument'] / 1e3:.3f} ms/step; host CPU to issue "
            f"{got['median_host_cpu_us']['instrumented'] / 1e3:.3f} vs "
            f"{got['median_host_cpu_us']['no-instrument'] / 1e3:.3f} ms)"
        )
    runs = sorted(p.parent for p in out.rglob("*.pt.trace.json.gz"))
    for run in dict.fromkeys(runs):
        print(
            f"{run.relative_to(out)}: wall step {_step_ms(run)} ms, sync warnings {_sync_warnings(run)}"
        )
        for line in _analysis_row(run):
            print(f"    {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
