"""The registry of findings: a finding added as a user adds one (a module and one
``register`` line) reaches ``diagnose``'s text, ``analyze --json`` and the dashboard's
findings view; the "no findings" sentence names every registered rule."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboards import views
from dashboards.data import RunRegistry, RunSource
from overlapscope.analysis.findings import MIN_STAKE_FRACTION, threshold_words
from overlapscope.analysis.findings.registry import (
    BUILT_IN,
    no_findings_sentence,
    register,
    rules,
    unregister,
)
from overlapscope.cli import main
from tests.analysis import user_finding
from tests.conftest import REPO

RUN = REPO / "traces" / "backward_pre"


@pytest.fixture
def registered() -> Iterator[None]:
    register(user_finding.RULE)
    try:
        yield
    finally:
        unregister(user_finding.KIND)


def _cli(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    return out.getvalue()


def test_a_registered_finding_is_in_diagnose_json_and_dashboard(
    registered: None, tmp_path: Path
) -> None:
    assert rules()[-1] is user_finding.RULE
    text = _cli("diagnose", str(RUN), "--no-progress")
    assert "a user's finding:" in text and "try: do what the user's rule says" in text
    _cli("analyze", str(RUN), "--json", str(tmp_path / "r.json"), "--no-progress")
    found = json.loads((tmp_path / "r.json").read_text())["findings"]
    assert [f["kind"] for f in found].count(user_finding.KIND) == 1
    source = RunSource(key="r", path=RUN, label="r", policy="backward_pre")
    page = str(views.overview_view(RunRegistry([source])))
    assert "a user's finding" in page and "do what the user's rule says" in page


def test_without_it_nothing_of_it_is_served_from_the_cache() -> None:
    """The analysis is cached with its findings: a run analysed after the rule is gone
    does not show it (the registry's digest is in the cache's keys)."""
    register(user_finding.RULE)
    try:
        assert "a user's finding:" in _cli("diagnose", str(RUN), "--no-progress")
    finally:
        unregister(user_finding.KIND)
    assert "a user's finding" not in _cli("diagnose", str(RUN), "--no-progress")


def test_the_no_findings_sentence_names_every_registered_rule(registered: None) -> None:
    sentence = no_findings_sentence()
    assert all(r.looks_for in sentence for r in rules())
    assert "the user's pattern" in sentence and threshold_words() in sentence
    assert threshold_words() == f"{MIN_STAKE_FRACTION:.0%} of the step time"


def test_a_kind_is_registered_once_and_built_ins_stay() -> None:
    with pytest.raises(ValueError, match="registered already"):
        register(BUILT_IN[0])
    with pytest.raises(ValueError, match="built-in"):
        unregister(BUILT_IN[0].kind)
    assert rules() == BUILT_IN


def test_the_stake_threshold_is_defined_once() -> None:
    """Every rule asks ``FindingInput.at_stake``; no module names the share again."""
    sources = [*(REPO / "overlapscope").rglob("*.py"), *(REPO / "dashboards").rglob("*.py")]
    defining = [p for p in sources if "MIN_STAKE_FRACTION =" in p.read_text()]
    assert defining == [REPO / "overlapscope" / "analysis" / "findings" / "__init__.py"]
    said = [p for p in sources if "1% of the step" in p.read_text()]
    assert said == []
