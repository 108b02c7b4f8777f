"""A longer run of the fuzz test: ``python scripts/fuzz_traces.py [--seeds N] [--start S]``.

Mutates real traces (``traces/`` and ``../shared/external-traces/``) and several ranks of the
sample runs at once, or with ``--manifest`` the sample run's ``run.json``, with seeds
S..S+N-1; runs the seed's reader on each (``analyze``, ``diagnose``, ``whatif``, the
dashboard's data path) and prints every case that did not end cleanly (a traceback, a
MemoryError, a changed input, an exit other than 0 or a one-line error 2, or a silent
outcome: an input that is not a valid trace with neither an error nor a new warning), then
the count of each outcome, in all and per reader. Exit status 1 if any did not end cleanly.
The suite runs a fixed, small set of seeds (tests/reliability/test_fuzz.py).
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.fuzz import OK, available_sources, run_case


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=500, help="how many seeds (default: 500)")
    p.add_argument("--start", type=int, default=0, help="first seed (default: 0)")
    p.add_argument(
        "--manifest",
        action="store_true",
        help="mutate the sample run's run.json instead of traces",
    )
    args = p.parse_args()
    if not available_sources():
        print("no source traces found (traces/ or ../shared/external-traces/)")
        return 1
    counts: collections.Counter[str] = collections.Counter()
    per_reader: collections.Counter[tuple[str, str]] = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="overlapscope-fuzz-") as work:
        for seed in range(args.start, args.start + args.seeds):
            r = run_case(seed, Path(work), manifest=args.manifest)
            counts[r.outcome] += 1
            per_reader[(r.mutation.split(":")[0], r.outcome)] += 1
            if not r.clean:
                print(f"seed {seed} ({r.source}; {r.mutation}): {r.outcome}: {r.detail}")
    print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    for reader in sorted({k for k, _ in per_reader}):
        row = {o: n for (k, o), n in per_reader.items() if k == reader}
        print(f"  {reader}: " + ", ".join(f"{k}: {v}" for k, v in sorted(row.items())))
    return 0 if set(counts) <= set(OK) else 1


if __name__ == "__main__":
    sys.exit(main())
