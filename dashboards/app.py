"""The app factory: ``create_app(runs)`` builds a Dash app over a fixed set of runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dash import Dash

from dashboards import callbacks, guard, perfetto_link
from dashboards.data import RunRegistry, RunSource
from dashboards.layout import build_layout
from dashboards.values import value_checks

if TYPE_CHECKING:
    from overlapscope.pipeline.run import Target

TITLE = "overlapscope dashboard"


def create_app(
    runs: Sequence[RunSource], *, use_disk_cache: bool = True, target: Target | None = None
) -> Dash:
    """A Dash app showing ``runs``; the browser can only pick among their keys.

    Nothing is loaded here: each run is analysed on first view (or ``warm``), then cached
    (in ``target``'s cache). ``target`` with ``dask``: each run is analysed as ``analyze
    --dask`` does, and its timeline read a step and a few ranks at a time from that cache
    (dashboards/big_run.py).
    """
    registry = RunRegistry(
        runs, use_disk_cache=use_disk_cache, **({"target": target} if target else {})
    )
    app = Dash(
        __name__,
        title=TITLE,
        suppress_callback_exceptions=True,  # the timeline graph exists only on its tab
        serve_locally=True,
    )
    # malformed requests or values: 4xx; capped bodies; only registered assets
    guard.install(app, value_checks([r.key for r in runs]))
    app.layout = build_layout(registry)
    callbacks.register(app, registry)
    perfetto_link.install(app, registry)
    app.server.config["OVERLAPSCOPE_REGISTRY"] = registry
    return app


def registry_of(app: Dash) -> RunRegistry:
    registry = app.server.config["OVERLAPSCOPE_REGISTRY"]
    assert isinstance(registry, RunRegistry)
    return registry
