"""The ranks tab's process-group filter (issue 44 point 8) on the real HSDP fixture: the
filter lists each group with its dimension, and a group's heat map holds its own ranks."""

from __future__ import annotations

import json
from typing import Any

from plotly.utils import PlotlyJSONEncoder

from dashboards import create_app, ids, views
from dashboards.app import registry_of
from dashboards.groups import EVERY
from dashboards.runs import discover_runs

from ..conftest import REPO

HSDP = REPO / "traces" / "parallel-hsdp"


def _find(node: Any, wanted: str) -> Any:
    if isinstance(node, dict):
        if node.get("props", {}).get("id") == wanted:
            return node
        return next((f for v in node.values() if (f := _find(v, wanted)) is not None), None)
    if isinstance(node, list):
        return next((f for v in node if (f := _find(v, wanted)) is not None), None)
    return None


def test_group_filter_lists_groups_and_dimensions() -> None:
    (run,) = discover_runs([HSDP])
    app = create_app([run], use_disk_cache=False)
    out = views.ranks_view(registry_of(app), run.key)
    tree = json.loads(json.dumps(out, cls=PlotlyJSONEncoder))
    picker = _find(tree, ids.GROUP)
    assert picker is not None
    options = {o["value"]: o["label"] for o in picker["props"]["options"]}
    assert options == {
        EVERY: EVERY,
        "mesh_replicate[0,2]": "mesh_replicate[0,2] · hsdp_replicate",
        "mesh_replicate[1,3]": "mesh_replicate[1,3] · hsdp_replicate",
        "mesh_shard[0,1]": "mesh_shard[0,1] · fsdp_shard",
        "mesh_shard[2,3]": "mesh_shard[2,3] · fsdp_shard",
    }


def test_group_filter_callback_shows_the_groups_ranks_over_http() -> None:
    (run,) = discover_runs([HSDP])
    app = create_app([run], use_disk_cache=False)
    body = {
        "output": f"{ids.RANKS_GRAPH}.figure",
        "outputs": {"id": ids.RANKS_GRAPH, "property": "figure"},
        "inputs": [{"id": ids.GROUP, "property": "value", "value": "mesh_replicate[1,3]"}],
        "state": [{"id": ids.RUN_A, "property": "value", "value": run.key}],
        "changedPropIds": [f"{ids.GROUP}.value"],
    }
    resp = app.server.test_client().post("/_dash-update-component", json=body)
    assert resp.status_code == 200, resp.get_data(as_text=True)[:300]
    fig = json.loads(resp.get_data(as_text=True))["response"][ids.RANKS_GRAPH]["figure"]
    heat = [t for t in fig["data"] if t["type"] == "heatmap"]
    assert heat and set(heat[0]["y"]) == {"rank 1", "rank 3"}
    assert len(heat[0]["x"]) == 10  # its 5 all-reduces a step, 2 steps
    assert "mesh_replicate[1,3]" in fig["layout"]["title"]["text"]
