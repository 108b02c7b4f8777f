"""Imports follow declared arrows (issue 31 point 5, issue 41 point 6): each package, and each
sub-package of ``analysis`` and ``trace``, may import only the packages :data:`ARROWS` lists for
it; the arrows make no cycle, and no module imports, directly or through others, a module that
imports it back. Every import statement counts, those inside functions and under
``TYPE_CHECKING`` too: an import moved into a function still ties the two modules together.
And each enum has one import path."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = ("overlapscope", "dashboards")
OVS, A, T = "overlapscope", "overlapscope.analysis", "overlapscope.trace"

# The nodes: a module belongs to the longest name listed that is it or a package holding it
# (``overlapscope`` itself: the small leaves beside the package's __init__: errors, arrays,
# phases, config, manifest, pool, ...). Each node may import its own modules and those of the
# nodes it points to. A graph, not an order: ``analysis.host`` and ``trace.read`` neither sit
# above nor below each other.
ARROWS: dict[str, set[str]] = {
    OVS: set(),
    f"{OVS}.lab": {OVS},  # the slow-network lab
    # trace/: from files to the event table
    T: set(),  # the package's docstring
    f"{T}.naming": {OVS},  # range names, generic event names, run-directory file names
    f"{T}.attribution": {OVS},  # what the producers' labelling shares
    f"{T}.schema": set(),  # the event table's columns
    f"{T}.capture": {OVS, f"{T}.naming"},  # writing traces
    f"{T}.read": {OVS, f"{T}.naming", f"{T}.attribution"},  # one file into raw columns
    f"{T}.groups": {OVS, f"{T}.attribution", f"{T}.read"},  # process groups, dimensions
    f"{T}.producers": {OVS, f"{T}.naming", f"{T}.attribution"},  # one module per framework
    f"{T}.recognize": {  # raw columns into the event table
        OVS, f"{T}.naming", f"{T}.attribution", f"{T}.read", f"{T}.groups", f"{T}.producers",
    },
    f"{T}.run": {  # a run's files into one event table: load_run
        OVS, f"{T}.naming", f"{T}.schema", f"{T}.read", f"{T}.recognize",
    },
    # analysis/: pure table-to-table figures
    f"{A}.fields": set(),  # how tables name their figures
    f"{A}.intervals": {OVS},  # interval-set maths
    f"{A}.segments": {OVS},  # a rank's step cut into what it was doing
    f"{A}.framework": {f"{T}.run"},  # which framework ran the job
    f"{A}.timeline": {OVS, f"{A}.fields", f"{A}.intervals", f"{T}.recognize", f"{T}.run"},
    f"{A}.host": {OVS, f"{A}.intervals", f"{A}.segments", f"{A}.timeline", f"{T}.attribution"},
    f"{A}.critical_path": {OVS, f"{A}.segments"},
    f"{A}.waiting": {
        OVS, f"{A}.fields", f"{A}.intervals", f"{A}.segments", f"{A}.timeline", f"{A}.host",
        f"{A}.critical_path", f"{T}.recognize", f"{T}.run",
    },
    f"{A}.collectives": {
        OVS, f"{A}.segments", f"{A}.waiting", f"{T}.groups", f"{T}.recognize",
    },
    f"{A}.clocks": {OVS, f"{A}.collectives", f"{T}.run"},
    f"{A}.hta": {f"{A}.host", f"{A}.timeline", f"{A}.waiting", f"{T}.run"},
    f"{A}.registry": {  # what the analysis computes, in one list
        OVS, f"{A}.framework", f"{A}.timeline", f"{A}.host", f"{A}.waiting",
        f"{A}.collectives", f"{A}.clocks", f"{T}.run",
    },
    f"{A}.findings": {
        OVS, f"{A}.framework", f"{A}.host", f"{A}.waiting", f"{A}.critical_path",
        f"{A}.registry", f"{T}.groups",
    },
    f"{A}.api": {  # analyze(run) -> RunAnalysis
        f"{A}.framework", f"{A}.timeline", f"{A}.waiting", f"{A}.critical_path", f"{A}.clocks",
        f"{A}.hta", f"{A}.registry", f"{A}.findings", f"{T}.run",
    },
    f"{A}.report": {OVS, f"{A}.api", f"{A}.waiting"},  # the text of a RunAnalysis
    A: {f"{A}.api", f"{A}.findings", f"{A}.hta"},  # the package's re-exports
    # what uses the analysis
    f"{OVS}.flight": {OVS, f"{A}.clocks", f"{A}.findings"},  # Flight Recorder dumps
    f"{OVS}.perfetto": {  # the analysis drawn as one trace of every rank
        OVS, f"{A}.api", f"{A}.clocks", f"{A}.critical_path", f"{T}.naming", f"{T}.read",
        f"{T}.groups", f"{T}.run",
    },
    f"{OVS}.cache": {OVS, f"{T}.read", f"{T}.producers", f"{T}.run"},
    f"{OVS}.cluster": {OVS, f"{T}.naming", f"{T}.run"},  # Dask's executor
    f"{OVS}.pipeline": {
        OVS, f"{OVS}.cache", f"{OVS}.cluster", f"{OVS}.perfetto", f"{A}.api", f"{A}.registry",
        f"{A}.findings", f"{A}.clocks", f"{A}.collectives", f"{A}.critical_path",
        f"{T}.schema", f"{T}.read", f"{T}.run",
    },
    f"{OVS}.engine": {  # the FSDP engine, profiled
        OVS, f"{OVS}.lab", f"{OVS}.flight", f"{T}.capture", f"{T}.naming", f"{T}.read",
    },
    f"{OVS}.bench": {OVS, f"{OVS}.engine"},
    f"{OVS}.sim": {  # the what-if
        OVS, f"{OVS}.engine", f"{OVS}.pipeline", A, f"{A}.intervals", f"{A}.timeline",
        f"{A}.clocks", f"{T}.naming", f"{T}.attribution", f"{T}.schema", f"{T}.producers",
        f"{T}.recognize", f"{T}.run",
    },
    f"{OVS}.sweep": {OVS, f"{OVS}.engine", f"{OVS}.pipeline", A, f"{T}.run"},
    "dashboards": {
        OVS, f"{OVS}.cache", f"{OVS}.flight", f"{OVS}.perfetto", f"{OVS}.pipeline",
        f"{OVS}.sim", f"{A}.api", f"{A}.timeline", f"{A}.clocks", f"{A}.critical_path",
        f"{A}.findings", f"{T}.groups", f"{T}.run",
    },
    f"{OVS}.commands": {
        OVS, f"{OVS}.lab", f"{OVS}.flight", f"{OVS}.perfetto", f"{OVS}.pipeline",
        f"{OVS}.engine", f"{OVS}.bench", f"{OVS}.sim", f"{OVS}.sweep", "dashboards",
        f"{A}.api", f"{A}.report", f"{A}.clocks", f"{A}.critical_path", f"{A}.findings",
        f"{T}.run",
    },
    f"{OVS}.cli": {OVS, f"{OVS}.commands"},
    f"{OVS}.__main__": {f"{OVS}.cli"},
}  # fmt: skip


def module_files(root: Path = REPO) -> dict[str, Path]:
    """Every module of the packages, by dotted name (a package by its own name)."""
    found = {}
    for pkg in PACKAGES:
        for path in (root / pkg).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(tree: ast.AST, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(module, line) of each import of a module of ours: ``from a import b`` imports the
    module ``a.b`` when there is one, else ``a``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                for a in node.names
            ]
        else:
            continue
        for name in names:
            while name and name not in modules:  # (a name of ours inside a module)
                name = name.rpartition(".")[0]
            if name:
                yield name, node.lineno


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """{module: {module it imports: line of the first such import}}."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges: dict[str, int] = {}
        for target, line in _imported(ast.parse(path.read_text()), modules):
            if target != name:
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def node(module: str, arrows: dict[str, set[str]] = ARROWS) -> str:
    """The node of :data:`ARROWS` a module belongs to: the longest name that is it or holds it."""
    held = [n for n in arrows if module == n or module.startswith(n + ".")]
    assert held, f"{module} is in no node: add it to ARROWS"
    return max(held, key=len)


def unallowed(
    graph: dict[str, dict[str, int]], modules: dict[str, Path], arrows: dict[str, set[str]]
) -> list[str]:
    return [
        f"{modules[a].relative_to(REPO)}:{line} imports {b}: "
        f"no arrow {node(a, arrows)} -> {node(b, arrows)} in ARROWS"
        for a, edges in sorted(graph.items())
        for b, line in edges.items()
        if node(a, arrows) != node(b, arrows) and node(b, arrows) not in arrows[node(a, arrows)]
    ]


def test_no_import_cycle() -> None:
    found = cycles(import_graph(module_files()))
    assert not found, "modules that import each other:\n" + "\n".join(map(str, found))


def test_every_import_follows_an_arrow() -> None:
    modules = module_files()
    bad = unallowed(import_graph(modules), modules, ARROWS)
    assert not bad, "\n".join(bad)


def test_the_arrows_make_no_cycle() -> None:
    found = cycles({a: dict.fromkeys(bs, 0) for a, bs in ARROWS.items()})
    assert not found, "packages that may import each other:\n" + "\n".join(map(str, found))


def test_every_node_and_arrow_names_a_package_or_module() -> None:
    modules = module_files()
    named = set(ARROWS) | {b for bs in ARROWS.values() for b in bs}
    assert not named - set(modules), f"not in the tree: {sorted(named - set(modules))}"


def test_each_module_of_analysis_and_trace_is_placed() -> None:
    """A flat module or sub-package of analysis/ or trace/ is a node of its own (a sub-package
    named for what it holds, or a leaf listed as one): one added there must say where it
    stands."""
    unplaced = [
        name
        for name in module_files()
        for pkg in (A, T)
        if name.startswith(pkg + ".") and node(name) == pkg
    ]
    assert not unplaced, f"add to ARROWS (or move into a sub-package): {sorted(unplaced)}"


@pytest.mark.parametrize(
    ("files", "found"),
    [
        # a cycle through a function-level import is a cycle
        ({"a": "import pkg.b", "b": "def f():\n    from pkg.a import x"}, [["pkg.a", "pkg.b"]]),
        ({"a": "import pkg.b", "b": "x = 1"}, []),
        ({"a": "from pkg import b", "b": "from pkg.c import y", "c": "from pkg.a import z"},
         [["pkg.a", "pkg.b", "pkg.c"]]),
    ],
)  # fmt: skip
def test_the_walker_finds_cycles(
    tmp_path: Path, files: dict[str, str], found: list[list[str]]
) -> None:
    (tmp_path / "pkg").mkdir()
    modules = {}
    for name, text in files.items():
        path = tmp_path / "pkg" / f"{name}.py"
        path.write_text(text + "\n")
        modules[f"pkg.{name}"] = path
    modules["pkg"] = tmp_path / "pkg" / "__init__.py"
    modules["pkg"].write_text("")
    assert cycles(import_graph(modules)) == found


def test_an_import_without_its_arrow_is_named() -> None:
    arrows = {"pkg": set(), "pkg.low": set(), "pkg.high": {"pkg.low"}}
    graph = {"pkg.low.x": {"pkg.high.y": 3}, "pkg.high.y": {"pkg.low.x": 1}}
    modules = {m: REPO / "pkg" / f"{m}.py" for m in graph}
    assert unallowed(graph, modules, arrows) == [
        "pkg/pkg.low.x.py:3 imports pkg.high.y: no arrow pkg.low -> pkg.high in ARROWS"
    ]


def _enums(modules: dict[str, Path]) -> dict[str, str]:
    """{enum class name: the module defining it}."""
    found: dict[str, str] = {}
    for name, path in modules.items():
        for node_ in ast.walk(ast.parse(path.read_text())):
            bases = [getattr(b, "attr", getattr(b, "id", "")) for b in getattr(node_, "bases", [])]
            if isinstance(node_, ast.ClassDef) and {"Enum", "IntEnum", "StrEnum"} & set(bases):
                assert node_.name not in found, f"two enums named {node_.name}"
                found[node_.name] = name
    return found


def test_each_enum_has_one_import_path() -> None:
    """Every import of an enum names the module that defines it, in the packages, tests,
    benchmarks and examples; no package re-exports one."""
    enums = _enums(module_files())
    assert {"Policy", "Phase", "Lane", "CollectiveKind"} <= set(enums)
    bad = []
    dirs = (*PACKAGES, "tests", "benchmarks", "examples")
    for path in sorted(p for d in dirs for p in (REPO / d).rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.ImportFrom) and n.module:
                bad += [
                    f"{path.relative_to(REPO)}:{n.lineno}: {a.name} from {n.module}, "
                    f"not {enums[a.name]}"
                    for a in n.names
                    if a.name in enums and n.module != enums[a.name]
                ]
    assert not bad, "\n".join(bad)
