"""Imports flow down (issue 31, point 5): no module imports, directly or through others, a
module that imports it back, and no layer imports one above it. Every import statement counts,
those inside functions and under ``TYPE_CHECKING`` too: an import moved into a function still
ties the two modules together. And each enum has one import path."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = ("overlapscope", "dashboards")
# Lowest first: a module may import its own layer's and lower layers' modules only. A module
# takes the layer of the longest prefix listed.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "overlapscope",  # the package's own __init__ (its version)
        "overlapscope.errors",
        "overlapscope.arrays",
        "overlapscope.phases",
        "overlapscope.outputs",
        "overlapscope.field_flags",
        "overlapscope.config",
        "overlapscope.manifest",
        "overlapscope.exit_guard",
        "overlapscope.pool",
        "overlapscope.table_files",
    ),
    ("overlapscope.lab",),
    ("overlapscope.trace",),
    ("overlapscope.analysis",),
    ("overlapscope.flight",),  # Flight Recorder dumps: read, matched, joined (analysis' rules)
    ("overlapscope.perfetto",),  # the analysis drawn as one trace of every rank
    ("overlapscope.cache",),
    ("overlapscope.cluster",),  # Dask's executor: runs whatever tasks it is given
    ("overlapscope.pipeline",),
    ("overlapscope.engine",),
    ("overlapscope.bench",),
    ("overlapscope.sim",),
    ("overlapscope.sweep",),
    ("dashboards",),
    ("overlapscope.commands",),
    ("overlapscope.cli", "overlapscope.__main__"),
)


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


def layer(module: str) -> int:
    best, at = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, at = len(p), i
    assert at >= 0, f"{module} is in no layer: add it to LAYERS"
    return at


def upward(graph: dict[str, dict[str, int]], modules: dict[str, Path]) -> list[str]:
    return [
        f"{modules[a].relative_to(REPO)}:{line} imports {b} (a layer above {a})"
        for a, edges in sorted(graph.items())
        for b, line in edges.items()
        if layer(b) > layer(a)
    ]


def test_no_import_cycle() -> None:
    found = cycles(import_graph(module_files()))
    assert not found, "modules that import each other:\n" + "\n".join(map(str, found))


def test_no_layer_imports_one_above_it() -> None:
    modules = module_files()
    bad = upward(import_graph(modules), modules)
    assert not bad, "\n".join(bad)


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


def _enums(modules: dict[str, Path]) -> dict[str, str]:
    """{enum class name: the module defining it}."""
    found: dict[str, str] = {}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            bases = [getattr(b, "attr", getattr(b, "id", "")) for b in getattr(node, "bases", [])]
            if isinstance(node, ast.ClassDef) and {"Enum", "IntEnum", "StrEnum"} & set(bases):
                assert node.name not in found, f"two enums named {node.name}"
                found[node.name] = name
    return found


def test_each_enum_has_one_import_path() -> None:
    """Every import of an enum names the module that defines it, in the packages, tests,
    benchmarks and examples; no package re-exports one."""
    enums = _enums(module_files())
    assert {"Policy", "Phase", "Lane", "CollectiveKind"} <= set(enums)
    bad = []
    dirs = (*PACKAGES, "tests", "benchmarks", "examples")
    for path in sorted(p for d in dirs for p in (REPO / d).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                bad += [
                    f"{path.relative_to(REPO)}:{node.lineno}: {a.name} from {node.module}, "
                    f"not {enums[a.name]}"
                    for a in node.names
                    if a.name in enums and node.module != enums[a.name]
                ]
    assert not bad, "\n".join(bad)
