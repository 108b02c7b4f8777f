"""The dashboard's views of where the GPU waits (issue 30): the figure of idle and exposed
communication by cause per rank, each unit's split, and the host's ops during its gaps,
from the analysis' own tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from dashboards import ids
from dashboards.tabs.ranks import waits_figure
from dashboards.wait_tables import host_ops_table, unit_split_table
from overlapscope.analysis import analyze
from overlapscope.trace.run.loader import load_run
from tests.analysis.gpu_runs import write_run
from tests.clocks.test_host_path import LOADER, OPTIM, host_bound


@pytest.fixture(scope="module")
def host_run(tmp_path_factory: pytest.TempPathFactory):
    return analyze(load_run(write_run(tmp_path_factory.mktemp("waits") / "run", host_bound())))


def test_waits_figure_stacks_each_cause_per_rank(host_run) -> None:
    fig = waits_figure(host_run.ranks)
    bars = {t.name: list(t.y) for t in fig.data}
    assert fig.layout.barmode == "stack"
    assert list(fig.data[0].x) == ["rank 0", "rank 1"]
    # rank 0: host-bound [260,410) 150 µs; rank 1: [360,610) 250 µs (ms per step)
    assert bars["idle: host-bound"] == pytest.approx([0.15, 0.25])
    total = [sum(v[i] for k, v in bars.items() if k.startswith("idle")) for i in (0, 1)]
    assert total == pytest.approx(list(host_run.ranks["idle_per_step_us"] / 1e3))


def test_host_ops_table_names_what_the_thread_did(host_run) -> None:
    table = host_ops_table(host_run.host_ops, num_ranks=2, num_steps=1.0)
    assert table["host_op"].tolist() == [OPTIM]  # the loader's time is before the GPU step
    assert table["idle_ms"].tolist() == pytest.approx([(0.15 + 0.25) / 2])
    assert table["host_activity"].tolist() == ["optimizer"]
    assert LOADER not in set(table["host_op"])


def test_unit_split_adds_up(tmp_path: Path) -> None:
    from tests.conftest import REPO

    a = analyze(load_run(REPO / "traces" / "backward_pre"))
    split = unit_split_table(a.units)
    parts = split["host_late_ms"] + split["peer_wait_ms"] + split["transfer_ms"]
    assert (abs(parts - split["exposed_ms"]) < 1e-6).all() and len(split) > 0


def test_ranks_view_shows_the_waits(sample_runs) -> None:
    from dashboards.data import RunRegistry
    from dashboards.views import ranks_view

    registry = RunRegistry(sample_runs)
    html = str(ranks_view(registry, sample_runs[0].key))
    assert ids.WAITS_GRAPH in html and ids.HOST_OPS in html
