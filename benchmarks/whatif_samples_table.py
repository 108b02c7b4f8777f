"""Every policy of the bundled samples predicted from every other (docs/WHATIF.md).

    python benchmarks/whatif_samples_table.py [SAMPLES_DIR]   (default: traces/)

The samples are fixed files (one workload at 0.5 Gbit/s, one run per configuration), so the
table is deterministic. Each cell: predicted step time, its error against the target's
measured step time, and the peak-memory error.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from overlapscope.sim import load_calibration, predict_from

CONFIGS = ["none", "backward_post", "backward_pre", "backward_pre+limit=2"]


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path("traces")
    calibs = {c: load_calibration(root / c) for c in CONFIGS}
    header = "| source \\ target | " + " | ".join(f"`{c}`" for c in CONFIGS) + " |"
    print(header)
    print("|---|" + "---:|" * len(CONFIGS))
    errs, mem = [], []
    for src, cal in calibs.items():
        cells = []
        for tgt in CONFIGS:
            m = calibs[tgt].measured
            p = predict_from(cal, m.scenario)
            e = 100 * (p.step_time_us - m.step_time_us) / m.step_time_us
            me = 100 * (p.peak_mem_bytes - m.peak_mem_bytes) / m.peak_mem_bytes
            errs.append(abs(e)) if src != tgt else None
            mem.append(abs(me)) if src != tgt else None
            cells.append(f"{p.step_time_us / 1e3:,.0f} ms ({e:+.1f} %, mem {me:+.1f} %)")
        print(f"| `{src}` | " + " | ".join(cells) + " |")
    print()
    print("| measured step time | " + " | ".join(f"{calibs[c].measured.step_time_us / 1e3:,.0f} ms" for c in CONFIGS) + " |")  # fmt: skip
    print()
    print(
        f"Across the {len(errs)} predictions of another configuration: step time "
        f"{statistics.median(errs):.1f} % median, {max(errs):.1f} % worst; peak memory "
        f"{max(mem):.1f} % worst."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
