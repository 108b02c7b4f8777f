"""How long the dashboard's timeline takes to build and to draw for a large step.

    python benchmarks/timeline_render.py                 # 100k events, Python side only
    python benchmarks/timeline_render.py --browser       # also draw it in headless Chromium
    python benchmarks/timeline_render.py --events 10000 100000 300000 --browser

A synthetic step of N intervals (4 ranks, every phase, 1 s long, plus 5% as many exposed
intervals) goes through what a Timeline callback does: ``step_panel`` ->
``timeline_figure`` -> ``fig.to_json()`` (what Dash sends). With ``--browser`` the JSON is
drawn with the plotly.js that Dash serves (``Plotly.newPlot`` in headless Chromium, timed in
the page with ``performance.now()``, first draw in a fresh page). Best of ``--repeat`` runs;
results as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dashboards.figures import step_panel, timeline_figure  # noqa: E402

PHASES = ["fwd", "bwd", "ag_fwd", "ag_bwd", "rs", "ag_fwd.wait", "ag_bwd.wait", "rs.wait"]
LANES = {"fwd": "compute", "bwd": "compute", "ag_fwd": "comm", "ag_bwd": "comm", "rs": "comm"}


def synthetic_step(num_events: int, seed: int = 0) -> tuple[pd.DataFrame, ...]:
    rng = np.random.default_rng(seed)
    phase = rng.choice(PHASES, num_events)
    start = rng.uniform(0, 1e6, num_events)
    dur = rng.exponential(1e6 / num_events * 4, num_events)
    timeline = pd.DataFrame(
        {
            "rank": rng.integers(0, 4, num_events).astype("int32"),
            "step": 5,
            "lane": pd.Categorical([LANES.get(p, "wait") for p in phase]),
            "phase": pd.Categorical(phase),
            "unit": pd.Categorical(rng.choice([f"layers.{i}" for i in range(32)], num_events)),
            "start_us": start,
            "end_us": start + dur,
            "dur_us": dur,
            "bytes": rng.integers(-1, 1 << 24, num_events),
        }
    )
    n_ex = num_events // 20
    ex_start = rng.uniform(0, 1e6, n_ex)
    exposed = pd.DataFrame(
        {"rank": rng.integers(0, 4, n_ex), "start_us": ex_start, "end_us": ex_start + 5.0}
    ).assign(dur_us=5.0)
    steps = pd.DataFrame({"rank": [0], "step": [5], "start_us": [0.0], "end_us": [1.05e6]})
    return timeline, exposed, steps


def build(num_events: int) -> tuple[float, float, str, int, int]:
    """(build seconds, to_json seconds, json, traces, bars)."""
    timeline, exposed, steps = synthetic_step(num_events)
    t0 = time.perf_counter()
    fig = timeline_figure([step_panel("synthetic", timeline, exposed, steps, 5)])
    t1 = time.perf_counter()
    doc = fig.to_json()
    t2 = time.perf_counter()
    bars = sum(len(t.x) for t in fig.data)
    return t1 - t0, t2 - t1, doc, len(fig.data), bars


PAGE = """<!doctype html><html><head><meta charset="utf-8">
<script src="plotly.min.js"></script></head><body><div id="g"></div><script>
window.drawn = null;
const fig = %s;
const t0 = performance.now();
Plotly.newPlot("g", fig.data, fig.layout).then(() => {
  requestAnimationFrame(() => { window.drawn = performance.now() - t0; });
});
</script></body></html>"""


def browser_ms(docs: list[str], repeat: int) -> list[float]:
    """Plotly.newPlot time (ms) of each figure, best of ``repeat`` fresh page loads."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options

    options = Options()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1400,1000")
    driver = webdriver.Chrome(options=options)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
        shutil.copy(js, Path(tmp) / "plotly.min.js")
        try:
            for i, doc in enumerate(docs):
                page = Path(tmp) / f"fig{i}.html"
                page.write_text(PAGE % doc)
                times = []
                for _ in range(repeat):
                    driver.get(page.as_uri())
                    deadline = time.monotonic() + 60
                    while (ms := driver.execute_script("return window.drawn")) is None:
                        if time.monotonic() > deadline:
                            raise RuntimeError("plotly did not draw within 60 s")
                        time.sleep(0.02)
                    times.append(float(ms))
                out.append(min(times))
        finally:
            driver.quit()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, nargs="+", default=[100_000])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--browser", action="store_true", help="also draw in headless Chromium")
    args = p.parse_args()
    rows = []
    docs = []
    for n in args.events:
        runs = [build(n) for _ in range(args.repeat)]
        build_s = min(r[0] for r in runs)
        json_s = min(r[1] for r in runs)
        _, _, doc, traces, bars = runs[0]
        docs.append(doc)
        rows.append(
            {
                "events": n,
                "build_ms": build_s * 1e3,
                "build_ms_median": statistics.median(r[0] for r in runs) * 1e3,
                "to_json_ms": json_s * 1e3,
                "json_kib": len(doc) / 1024,
                "traces": traces,
                "bars": bars,
            }
        )
    if args.browser:
        for row, ms in zip(rows, browser_ms(docs, args.repeat), strict=True):
            row["browser_draw_ms"] = ms
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---:|" * len(cols))
    for row in rows:
        cells = [f"{v:,.0f}" if isinstance(v, int) else f"{v:,.1f}" for v in row.values()]
        print("| " + " | ".join(cells) + " |")
    print(json.dumps(rows), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
