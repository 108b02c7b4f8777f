"""Where one rank file's ``--dask`` tasks spend CPU and memory, phase by phase.

    python benchmarks/decode_phases.py FILE [--repeat 3]

In a fresh process per repeat: the parse task's phases (``read_trace``: read, gunzip and
decode; of it, msgspec's decoding of the events alone; ``recognize``; the event cache write)
and the reduce task's (reading the events back, the per-rank tables, writing them). Per
phase: CPU time (user + sys, best of the repeats) and the resident set's peak above the
imported process during it (Linux: the peak is reset before each phase), in MB. Printed as
JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PHASES = """
import json, pickle, resource, sys, tempfile
import msgspec
from pathlib import Path
import pandas, pyarrow
from overlapscope.analysis.registry import rank_tables
from overlapscope.cache import Cache, code_digest, entry_key
from overlapscope.pipeline import memory, tasks
from overlapscope.pipeline.executor import LocalExecutor
from overlapscope.pipeline.plan import Inputs, plan
from overlapscope.table_files import write_events, write_table
from overlapscope.trace import decode, fields
from overlapscope.trace.run.loader import RunTraces
from overlapscope.trace.read.parse import read_trace
from overlapscope.trace.recognize.table import recognize

def mb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
out, idle = {}, mb("VmRSS")
def phase(name, fn):
    open("/proc/self/clear_refs", "w").write("5")
    t = cpu()
    result = fn()
    out[name] = {"cpu_s": cpu() - t, "peak_above_idle_mb": mb("VmHWM") - idle}
    return result
spent = [0.0]
add_slice = decode.EventColumns.add_slice
def timed(self, text, lo, hi):
    first, last = text[lo], text[hi - 1]
    text[lo], text[hi - 1] = 0x5B, 0x5D
    t = cpu()
    try:  # as add_slice decodes: by phase, else as before
        decoded = fields.BY_PHASE.decode(memoryview(text)[lo:hi])
    except msgspec.DecodeError:
        decoded = fields.EVENTS.decode(memoryview(text)[lo:hi])
    spent[0] += cpu() - t
    text[lo], text[hi - 1] = first, last
    self.add(decoded)
decode.EventColumns.add_slice = timed
path = Path(sys.argv[1])
memory.released().__enter__()  # the tasks' allocator settings for every phase
with tempfile.TemporaryDirectory() as d:
    raw = phase("read_trace", lambda: read_trace(path))
    out["read_trace"]["msgspec_decode_cpu_s"] = spent[0]
    table = phase("recognize", lambda: recognize(raw, raw.world_size or 0))
    del raw
    events = table.events.reset_index(drop=True)
    phase("write_events", lambda: write_events(Path(d) / "events", events))
    del table, events
    tasks.parse_to_cache(str(path), 0, d, entry_key(path, 0), code_digest())
    _, _, jobs = plan(Inputs((path,), allow_missing_ranks=True), LocalExecutor(), Cache(Path(d)))
    job = jobs[0]
    ev = phase("reduce_read", lambda: tasks.rank_events(job, Cache(Path(d))))
    run = RunTraces(
        events=ev, ranks=(job.info,), world_size=job.world_size, manifest=job.manifest,
        completed_run=job.completed_run, warnings=(), sources=(job.info.path,),
    )
    tables = phase("reduce_tables", lambda: rank_tables(run))
    def write():
        for name in (*tasks.EVENTS_FIGURES, *tasks.ON_DEMAND_FIGURES):
            write_table(Path(d) / "out" / f"{name}.arrow", tables[name])
        pickle.dumps({name: tables[name] for name in tasks.SUMMARY_FIGURES})
    phase("reduce_write", write)
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = []
    for _ in range(args.repeat):
        cmd = [sys.executable, "-c", PHASES, str(args.file.resolve())]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    for name in runs[0]:
        row = {key: min(r[name][key] for r in runs) for key in runs[0][name]}
        print(json.dumps({"phase": name, **row}), flush=True)


if __name__ == "__main__":
    main()
