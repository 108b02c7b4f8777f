"""CPU time of the CLI's start: ``overlapscope --help`` and each command's ``--help``, and a
re-analysis served whole by the cache, each in a fresh process.

    python benchmarks/cli_start.py [--repeat N]

Each command runs ``--repeat`` times (alternating); the CPU time (user + sys) of the process
comes from ``wait4``, and the modules it imported from ``python -X importtime``. The best run
of each is reported (on a shared machine the others measure the neighbours), with the median.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = ["run", "analyze", "diagnose", "dashboard", "sweep", "bench-collectives", "whatif"]


def cpu_s(argv: list[str], env: dict[str, str]) -> float:
    """User + sys CPU seconds of one run of ``argv``."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed")
    return usage.ru_utime + usage.ru_stime


def modules(argv: list[str], env: dict[str, str]) -> int:
    """How many modules ``argv`` (``python -m overlapscope ...``) imports."""
    cmd = [sys.executable, "-X", "importtime", *argv[1:]]
    err = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stderr
    return sum(1 for line in err.splitlines() if line.startswith("import time:")) - 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PYTHONPATH": str(REPO), "OVERLAPSCOPE_CACHE": cache}
        base = [sys.executable, "-m", "overlapscope"]
        cases = {"overlapscope --help": [*base, "--help"]}
        cases |= {f"overlapscope {c} --help": [*base, c, "--help"] for c in COMMANDS}
        run = str(REPO / "traces" / "none")
        cases["overlapscope analyze traces/none (cached)"] = [*base, "analyze", run]
        cpu_s(cases["overlapscope analyze traces/none (cached)"], env)  # fills the cache
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.repeat):
            for name, argv in cases.items():
                times[name].append(cpu_s(argv, env))
        print("| command | CPU s, best | CPU s, median | modules imported |")
        print("|---|---|---|---|")
        for name, argv in cases.items():
            t = times[name]
            n = modules(argv, env)
            print(f"| `{name}` | {min(t):.3f} | {statistics.median(t):.3f} | {n} |")


if __name__ == "__main__":
    main()
