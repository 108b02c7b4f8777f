"""Markdown table of ``overlapscope bench-collectives --json`` results, one row per size.

    python benchmarks/collectives_table.py docs/bench/collectives-n2-*.json

Columns: size, link, then per collective its median time, bus bandwidth and busbw / link.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _rows(doc: dict) -> list[str]:  # type: ignore[type-arg]
    link = doc["link_gbit"]
    by_size: dict[int, dict[str, dict]] = {}  # type: ignore[type-arg]
    for row in doc["rows"]:
        by_size.setdefault(row["size_bytes"], {})[row["collective"]] = row
    out = []
    for size, cols in sorted(by_size.items()):
        cells = [f"{size / 2**20:g} MB", "unshaped" if link is None else f"{link:g}"]
        for kind in ("all_gather", "reduce_scatter"):
            r = cols[kind]
            ratio = r["busbw_over_link"]
            cells += [
                f"{r['time_us_median'] / 1e3:.1f}",
                f"{r['busbw_gbit_s']:.3f}",
                "-" if ratio is None else f"{ratio:.0%}",
            ]
        out.append("| " + " | ".join(cells) + " |")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", type=Path)
    args = p.parse_args()
    print(
        "| size | link | all-gather ms | AG busbw | AG / link "
        "| reduce-scatter ms | RS busbw | RS / link |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for f in args.files:
        print("\n".join(_rows(json.loads(f.read_text()))))


if __name__ == "__main__":
    main()
