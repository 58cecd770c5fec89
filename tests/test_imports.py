"""Import hygiene of the package: no import cycle among its modules, and no function that
re-imports what its module already imports at the top. (That ``trajstore/`` never imports torch or
``trajstore.trainer`` is checked in tests/test_layout.py.)

The import graph is read from the source with :mod:`ast`, not by importing: an edge ``a -> b``
for every import that runs when ``a`` is imported (module level, inside ``if`` / ``try`` too, but
not under ``if TYPE_CHECKING``), to the most specific module the statement names
(``from trajstore.store import layout`` -> ``trajstore.store.layout``; ``from trajstore.store
import Store`` -> ``trajstore.store``)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"trajstore": ROOT / "trajstore", "trajstore.trainer": ROOT / "trainer", "trajstore.cli": ROOT / "cli"}
"""Import name -> source folder (pyproject maps trainer/ and cli/ into the trajstore package)."""


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for name, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([name, *parts])] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _import_time_statements(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run when a module with `body` is imported."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node):
                yield from _import_time_statements(node.body)
            yield from _import_time_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                yield from _import_time_statements(block)
        elif isinstance(node, ast.With):
            yield from _import_time_statements(node.body)


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The package modules `node` (in `module`) imports."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    base = node.module or ""
    if node.level:
        anchor = module.split(".")
        anchor = anchor if is_package else anchor[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, *([base] if base else [])])
    out = set()
    for alias in node.names:
        child = f"{base}.{alias.name}"
        if child in known:
            out.add(child)
        elif base in known:
            out.add(base)
    return out


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the package modules it imports at import time, for `sources` (module -> code)."""
    known = set(sources)
    graph: dict[str, set[str]] = {}
    for module, code in sources.items():
        is_package = module in {m.rsplit(".", 1)[0] for m in known if "." in m}
        statements = _import_time_statements(ast.parse(code).body)
        graph[module] = {t for s in statements for t in _targets(s, module, is_package, known)} - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm; the graph is a few hundred modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_one_cycle(graph, c) for c in components]


def _one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the first module of `component` (breadth-first inside it)."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle in component {sorted(component)}")


def test_no_import_cycle_among_the_package_modules() -> None:
    graph = import_graph({m: p.read_text() for m, p in _modules().items()})
    assert len(graph) > 100  # the walk found the package, not an empty folder
    found = cycles(graph)
    assert not found, "import cycles (each module imports the next at import time):\n" + "\n".join(
        " -> ".join(c) for c in found)


@pytest.mark.parametrize(("sources", "expected"), [
    ({"p.a": "import p.b", "p.b": "from p import a"}, [["p.a", "p.b", "p.a"]]),
    ({"p": "from p.a import x", "p.a": "from p.b import y", "p.b": "from . import a"}, [["p.a", "p.b", "p.a"]]),
    ({"p.a": "if True:\n    from p.b import f", "p.b": "try:\n    import p.c\nexcept ImportError:\n    pass",
      "p.c": "from p.a import g"}, [["p.a", "p.b", "p.c", "p.a"]]),
])
def test_the_cycle_check_finds_each_way_of_closing_a_cycle(sources: dict[str, str], expected: list[list[str]]) -> None:
    assert cycles(import_graph(sources)) == expected


@pytest.mark.parametrize("sources", [
    {"p.a": "import p.b", "p.b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.a import T"},
    {"p.a": "import p.b", "p.b": "def f():\n    from p.a import g\n    return g"},
    {"p.a": "import p.b", "p.b": "import p.c", "p.c": "import json"},
])
def test_the_cycle_check_leaves_acyclic_graphs_alone(sources: dict[str, str]) -> None:
    assert cycles(import_graph(sources)) == []


def reimports(code: str) -> list[str]:
    """``line: statement`` of each import inside a function that imports a module, or a name of a
    module, that the file already imports at the top."""
    tree = ast.parse(code)
    top: set[str] = set()
    for node in _import_time_statements(tree.body):
        if isinstance(node, ast.Import):
            top |= {a.name for a in node.names}
        elif node.module:
            top |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import) and {a.name for a in node.names} & top:
                out.append(f"{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.ImportFrom) and node.module in top:
                out.append(f"{node.lineno}: {ast.unparse(node)}")
    return sorted(set(out), key=lambda s: int(s.split(":")[0]))


def test_no_function_re_imports_what_its_module_imports_at_the_top() -> None:
    bad = [f"{p.relative_to(ROOT)}:{r}" for p in _modules().values() for r in reimports(p.read_text())]
    assert not bad, "imports inside functions of what the module imports at the top:\n" + "\n".join(bad)


@pytest.mark.parametrize(("code", "expected"), [
    ("import json\ndef f():\n    import json\n", ["3: import json"]),
    ("from a.b import c\ndef f():\n    from a.b import d\n", ["3: from a.b import d"]),
    ("import a\nclass K:\n    def m(self):\n        import a\n", ["4: import a"]),
    ("import json\ndef f():\n    import polars\n", []),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import polars\ndef f():\n    import polars\n", []),
])
def test_the_reimport_check(code: str, expected: list[str]) -> None:
    assert reimports(code) == expected
