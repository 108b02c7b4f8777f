"""Helpers of the what-if tests (tests/dashboard/test_whatif.py): pick a sample run, build
scenario controls, and read text, table cells and error panels out of Dash components."""

from __future__ import annotations

from typing import Any

from dash import html

from dashboards import ids
from dashboards.data import RunSource, read_manifest


def by_policy(runs: list[RunSource], policy: str, limit: int | None = None) -> RunSource:
    """The bundled CPU sweep's run of ``policy`` (traces/ also holds GPU runs of the same
    policies: another workload)."""
    for r in runs:
        m = read_manifest(r.path)
        engine = m.engine if m and m.device != "cuda" else None
        if engine and engine.policy.value == policy and engine.limit_all_gathers == limit:
            return r
    raise AssertionError(f"no sample run with policy {policy} and limit {limit}")


def scenario_controls(
    policy: str = "backward_pre",
    fwd: Any = (),
    limit: Any = "off",
    mode: str = "scale",
    value: Any = 1,
) -> tuple[Any, ...]:
    return policy, fwd, limit, mode, value


def texts(component: Any) -> list[str]:
    """Every string inside a component tree, in order."""
    children = getattr(component, "children", component)
    if isinstance(children, str):
        return [children]
    if isinstance(children, int | float):
        return [str(children)]
    if isinstance(children, list | tuple):
        return [t for c in children for t in texts(c)]
    if children is None or children is component:
        return []
    return texts(children)


def table_rows(table: html.Table) -> tuple[list[str], list[list[str]]]:
    head, body = table.children
    headers = [th.children for th in head.children.children]
    rows = [[td.children for td in tr.children] for tr in body.children]
    return headers, rows


def number(cell: str) -> float:
    return float(cell.replace(",", "").replace("+", ""))


def error_text(out: list[Any]) -> str:
    panels = [c for c in out if getattr(c, "className", None) == ids.ERROR_PANEL_CLASS]
    assert len(panels) == 1, out
    text = "".join(texts(panels[0]))
    assert "\n" not in text and "Traceback" not in text
    return text
