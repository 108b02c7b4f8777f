"""The manuals give the current figures, each with its command; history stays in git (issue 41,
point 8). docs/bench/ holds exactly the results the docs cite, and a benchmark's default
output is one of them."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO

MANUALS = ("WHATIF.md", "LAB.md", "BENCHMARKS.md")
BENCH = REPO / "docs" / "bench"
# Words of a diary: rounds of measurement and their dates.
ROUNDS = re.compile(
    r"^#+ .*\b(Latest|Earlier|Finding|Follow-up|Resolution|Re-measured)\b|\*\*(Latest|Earlier)\*\*"
    r"|\bEarlier measurements\b|\bbefore → now\b|\b20\d\d-\d\d-\d\d\b",
    re.M,
)
# A results file named in text: ``docs/bench/NAME`` or ``bench/NAME``, or a bare name that
# docs/bench holds (after a first full path in the same paragraph).
CITED = re.compile(r"(?:docs/)?bench/([\w.+-]+\.(?:json|md|csv))")


def _text(path: str) -> str:
    return (REPO / path).read_text()


def _docs() -> dict[str, str]:
    found = {"README.md": _text("README.md")}
    found.update({f"docs/{p.name}": p.read_text() for p in sorted((REPO / "docs").glob("*.md"))})
    found.update({str(p.relative_to(REPO)): p.read_text() for p in BENCH.glob("*.md")})
    return found


def cited() -> dict[str, str]:
    """{results file name: the doc that cites it}: by its path, or by its bare name in
    backticks (a list after a first ``docs/bench/...``)."""
    names = {p.name for p in BENCH.iterdir()}
    found: dict[str, str] = {}
    for doc, text in _docs().items():
        for name in CITED.findall(text):
            found.setdefault(name, doc)
        for name in re.findall(r"`([\w.+-]+\.(?:json|md))`", text):
            if name in names:
                found.setdefault(name, doc)
    return found


@pytest.mark.parametrize("manual", MANUALS)
def test_manuals_hold_no_rounds_and_no_dates(manual: str) -> None:
    found = [m.group(0) for m in ROUNDS.finditer(_text(f"docs/{manual}"))]
    assert found == [], f"docs/{manual}: history belongs to git: {found}"


def test_every_results_file_is_cited_and_every_cited_one_exists() -> None:
    names = {p.name for p in BENCH.iterdir()}
    refs = cited()
    assert sorted(names - refs.keys()) == [], "docs/bench files no doc cites"
    missing = {name: doc for name, doc in refs.items() if name not in names}
    assert missing == {}, "cited results that docs/bench lacks"


def test_each_benchmarks_default_output_is_a_cited_result() -> None:
    """A benchmark run without ``--out`` refreshes a result the docs cite, never a new
    file in docs/bench that nothing reads."""
    refs = cited()
    for path in sorted([*(REPO / "benchmarks").glob("*.py"), *(REPO / "scripts").rglob("*.py")]):
        text = path.read_text()
        for name in re.findall(r"default=[^,]*docs/bench/([a-z0-9_.+-]+\.json)", text):
            assert name in refs, f"{path.name} writes docs/bench/{name} by default: cite it"
        joined = re.findall(r'default=REPO / "docs" / "bench" / "([\w.+-]+)"', text)
        for name in joined:
            assert name in refs, f"{path.name} writes docs/bench/{name} by default: cite it"
    engine_bench = _text("benchmarks/engine_bench.py")
    named = re.search(r'"--name", default="([\w.-]+)"', engine_bench)
    assert named is not None and f"{named[1]}.json" in refs


def test_the_check_sees_an_uncited_file_and_a_round() -> None:
    assert ROUNDS.search("## Finding: the link\n") and ROUNDS.search("measured 2026-11-21")
    assert not ROUNDS.search("## Why the collectives are rings\n")
    assert CITED.findall("see `docs/bench/whatif.json` and bench/dashboard-load.md") == [
        "whatif.json",
        "dashboard-load.md",
    ]
