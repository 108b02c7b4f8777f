"""``overlapscope sweep``: run prefetch configurations side by side and compare them.

Public API::

    points = parse_points("none,backward_pre,backward_pre+limit")
    runs = run_sweep(base_config, points, repeats, out_dir, on_event)  # one row per run
    summary = summarize(runs, points_table(points))                    # one row per config
    write_outputs(out_dir, summary, runs, meta)   # summary.{json,csv,md}, tradeoff.html

Modules: ``spec`` (what varies), ``runner`` (launch + analyse), ``metrics`` (pure table
functions), ``report`` (files and the chart).
"""

from overlapscope.sweep.metrics import RUN_COLUMNS, SUMMARY_COLUMNS, run_metrics, summarize
from overlapscope.sweep.report import tradeoff_figure, write_outputs
from overlapscope.sweep.runner import RunEvent, points_table, run_dir, run_sweep
from overlapscope.sweep.spec import SweepPoint, parse_point, parse_points

__all__ = [
    "RUN_COLUMNS",
    "SUMMARY_COLUMNS",
    "RunEvent",
    "SweepPoint",
    "parse_point",
    "parse_points",
    "points_table",
    "run_dir",
    "run_metrics",
    "run_sweep",
    "summarize",
    "tradeoff_figure",
    "write_outputs",
]
