"""One entry point (issue 41.1): every consumer gets its analysis from
``pipeline.run.analyse``, a whole analysis has one key, and nothing else loads and analyses a
run on its own."""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dashboards.data import RunRegistry, discover_runs, fingerprint
from dashboards.perfetto_link import export_run
from overlapscope.cli import main
from overlapscope.pipeline import run as pipeline_run
from overlapscope.pipeline.plan import Inputs
from overlapscope.pipeline.run import IN_PROCESS, Target, analyse, analysis_key
from overlapscope.sim.predict import load_calibration
from tests.conftest import REPO

RUN = REPO / "traces" / "none"  # a shipped CPU run with run.json: every consumer reads it
# The modules that may load a run or call analyze(): the loader and analysis themselves, the
# entry point's in-process executor, and the plan's loader hook.
MAY_LOAD = ("overlapscope/trace/", "overlapscope/analysis/", "overlapscope/pipeline/run.py",
            "overlapscope/pipeline/plan.py")  # fmt: skip


Calls = list[tuple[tuple[Path, ...], bool]]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    """Every call of the entry point ((paths, in process) each), wherever it was imported."""
    seen: Calls = []
    real = pipeline_run.analyse

    def spy(inputs: Inputs, target: Target | None = None, *a: Any, **kw: Any) -> Any:
        seen.append((inputs.paths, bool(kw.get("hta")) or (target or Target()).in_process))
        return real(inputs, target, *a, **kw)

    for mod in list(sys.modules.values()):
        if getattr(mod, "analyse", None) is real:
            monkeypatch.setattr(mod, "analyse", spy)
    return seen


def _registry() -> tuple[RunRegistry, str]:
    registry = RunRegistry(discover_runs([RUN]), use_disk_cache=False)
    return registry, registry.sources[0].key


CONSUMERS: dict[str, Callable[[Path], object]] = {
    "analyze": lambda tmp: main(["analyze", str(RUN), "--json", str(tmp / "a.json")]),
    "diagnose": lambda tmp: main(["diagnose", str(RUN)]),
    "analyze --hta": lambda tmp: main(["analyze", str(RUN), "--hta", "--json", str(tmp / "h")]),
    "analyze --perfetto": lambda tmp: main(["analyze", str(RUN), "--perfetto", str(tmp / "p")]),
    "dashboard": lambda tmp: _registry()[0].load(_registry()[1]),
    "dashboard perfetto": lambda tmp: export_run(*_registry(), None, None, tmp / "p.json.gz"),
    "what-if calibration": lambda tmp: load_calibration(RUN),
    "python api": lambda tmp: analyse(Inputs((RUN,)), IN_PROCESS),
}


@pytest.mark.parametrize("consumer", list(CONSUMERS))
def test_every_consumer_goes_through_the_one_entry_point(
    consumer: str, calls: Calls, tmp_path: Path
) -> None:
    CONSUMERS[consumer](tmp_path)
    assert calls, f"{consumer} made its analysis without pipeline.run.analyse"
    assert {paths for paths, _ in calls} == {(RUN,)}


def _imports(tree: ast.AST) -> set[str]:
    return {
        a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith(("overlapscope.trace", "overlapscope.analysis"))
        for a in node.names
    }


def test_no_module_loads_and_analyses_a_run_beside_the_entry_point() -> None:
    """``load_run`` and ``analyze`` are imported only by the loader and the analysis, the entry
    point and the plan's loader hook: a new consumer cannot grow a second route."""
    found = []
    for root in ("overlapscope", "dashboards"):
        for src in sorted((REPO / root).rglob("*.py")):
            rel = src.relative_to(REPO).as_posix()
            if rel.startswith(MAY_LOAD):
                continue
            names = _imports(ast.parse(src.read_text()))
            found += [f"{rel} imports {n}" for n in sorted(names & {"load_run", "analyze"})]
    assert not found


def test_the_dashboard_key_is_the_pipeline_key(tmp_path: Path) -> None:
    """The dashboard's fingerprint of a run is the analysis key of the same inputs: the
    ``result`` entry ``analyze --csv`` writes for it has that very name."""
    key = analysis_key(Inputs((RUN,)), timeline=True, on_demand=True)
    assert fingerprint(RUN) == key
    cache = tmp_path / "cache"
    argv = ["analyze", str(RUN), "--cache", str(cache), "--csv", str(tmp_path / "csv")]
    assert main([*argv, "--json", str(tmp_path / "a.json")]) == 0
    assert (cache / f"result-{key}.pkl").is_file()
