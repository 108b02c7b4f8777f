"""Write a sweep's outputs: ``summary.json``, ``summary.csv``, ``summary.md``, ``tradeoff.html``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from overlapscope.outputs import write_files

SUMMARY_JSON = "summary.json"
SUMMARY_CSV = "summary.csv"
SUMMARY_MD = "summary.md"
TRADEOFF_HTML = "tradeoff.html"

_MD_COLUMNS = {
    "config": "config",
    "repeats": "repeats",
    "step_time_per_step_ms": "step time ms (median)",
    "step_time_spread_pct": "spread %",
    "throughput_samples_s": "samples/s",
    "exposed_comm_per_step_ms": "exposed comm ms",
    "nccl_wait_per_step_ms": "NCCL wait ms",
    "overlap_pct": "overlap %",
    "peak_mem_mib": "peak mem MiB",
}


def _plain(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):  # NaN/inf are not JSON
        return None
    if hasattr(v, "item"):  # numpy scalar
        return _plain(v.item())
    return v


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _plain(v) for k, v in row.items()} for row in df.to_dict(orient="records")]


def _markdown(summary: pd.DataFrame, meta: dict[str, Any]) -> str:
    cols = list(_MD_COLUMNS)
    head = "| " + " | ".join(_MD_COLUMNS[c] for c in cols) + " |"
    rule = "|" + "|".join("---" if c == "config" else "---:" for c in cols) + "|"
    body = []
    for row in summary[cols].itertuples(index=False):
        cells = [
            ("n/a" if math.isnan(v) else f"{v:,.1f}") if isinstance(v, float) else str(v)
            for v in row
        ]
        body.append("| " + " | ".join(cells) + " |")
    link = meta.get("link_gbit")
    lines = [
        "# Sweep summary",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"{meta['nproc']} ranks, {meta['device']}/{meta['backend']}, model {meta['model']}, "
        f"global batch {meta['global_batch']}, seed {meta['seed']}, "
        f"link {'loopback' if link is None else f'{link:g} Gbit/s (lab)'}; "
        f"{meta['repeats']} repeats per config, run in round-robin order.",
        "",
        head,
        rule,
        *body,
        "",
        "Per run, over the profiled steps: step time = slowest rank, median over steps; exposed "
        "comm and NCCL wait = mean over ranks, median over steps; overlap = mean over ranks; "
        "peak memory = largest rank. Across repeats: median; spread = (max - min) / median.",
        "",
    ]
    return "\n".join(lines)


def tradeoff_figure(summary: pd.DataFrame) -> go.Figure:
    """Step time vs peak memory, one point per configuration, min-max bars over repeats."""
    fig = go.Figure(
        go.Scatter(
            x=summary["peak_mem_mib"],
            y=summary["step_time_per_step_ms"],
            mode="markers+text",
            text=summary["config"],
            textposition="top center",
            error_y={
                "type": "data",
                "symmetric": False,
                "array": summary["step_time_per_step_max_ms"] - summary["step_time_per_step_ms"],
                "arrayminus": summary["step_time_per_step_ms"]
                - summary["step_time_per_step_min_ms"],
            },
            customdata=summary[["overlap_pct", "exposed_comm_per_step_ms"]].to_numpy(),
            hovertemplate=(
                "%{text}<br>step %{y:.1f} ms<br>peak %{x:.1f} MiB<br>"
                "overlap %{customdata[0]:.0f}%<br>exposed comm %{customdata[1]:.1f} ms"
                "<extra></extra>"
            ),
        )
    )
    fig.update_layout(
        title="Prefetch policies: step time vs peak memory (bars: min-max over repeats)",
        xaxis_title="peak memory per rank (MiB)",
        yaxis_title="step time (ms, median over repeats)",
        template="plotly_white",
    )
    return fig


def write_outputs(
    out: Path, summary: pd.DataFrame, runs: pd.DataFrame, meta: dict[str, Any]
) -> list[Path]:
    """Write all four outputs into ``out``, each whole; return their paths."""
    paths = [out / n for n in (SUMMARY_JSON, SUMMARY_CSV, SUMMARY_MD, TRADEOFF_HTML)]
    doc = {"sweep": meta, "summary": _records(summary), "runs": _records(runs)}
    # Self-contained HTML (plotly.js embedded): opens offline.
    html = tradeoff_figure(summary).to_html(include_plotlyjs=True, full_html=True)
    texts = [
        json.dumps(doc, indent=2, allow_nan=False) + "\n",
        summary.to_csv(index=False),
        _markdown(summary, meta),
        html,
    ]
    write_files((path, text, "--out") for path, text in zip(paths, texts, strict=True))
    return paths
