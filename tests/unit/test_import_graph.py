"""The shape of x402srv's imports: no cycle, and a light ``import x402srv``.

A cycle is counted over every import a module writes: at module level, under
``TYPE_CHECKING`` and inside functions, and ``from x402srv.pkg import sub`` in
a module of ``pkg`` counts as importing ``pkg/__init__``. That is stricter
than what Python trips over at import time, on purpose: a cycle hidden behind
``TYPE_CHECKING`` or a function-level import today is one refactoring away
from an ``ImportError`` (issue 24 found four).

The weight checks run in a fresh interpreter: every plugin imports
``x402srv`` and ``x402srv.plugin``, so neither may pull in the web framework or
web3, and the plugin API must not lean on a built-in plugin.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO

PACKAGE = REPO / "x402srv"


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module and package of x402srv."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported_names(tree: ast.Module, name: str, is_package: bool) -> Iterator[str]:
    """Every dotted name a module's imports mention, wherever in the file they are."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        edges = set()
        for target in imported_names(tree, name, path.name == "__init__.py"):
            while target and target not in known:  # a name inside a module -> the module
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycle_in_x402srv() -> None:
    graph = import_graph()
    assert len(graph) > 100  # the walk found the package
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    """The checker itself: a two-module cycle and a package importing back into itself."""
    graph = {
        "x402srv.a": {"x402srv.b"},
        "x402srv.b": {"x402srv.a"},
        "x402srv.pkg": {"x402srv.pkg.mod"},
        "x402srv.pkg.mod": {"x402srv.pkg", "x402srv.c"},
        "x402srv.c": set(),
    }
    assert sorted(cycles(graph)) == [["x402srv.a", "x402srv.b"], ["x402srv.pkg", "x402srv.pkg.mod"]]


def test_hidden_imports_count() -> None:
    """Under ``TYPE_CHECKING``, inside a function, or relative: each is an edge all the same."""
    code = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from x402srv.config import models\n"
        "def later():\n"
        "    import x402srv.server.app\n"
        "from .cache import VerifiedTokens\n"
    )
    names = set(imported_names(ast.parse(code), "x402srv.tokens.verify", is_package=False))
    assert {"x402srv.config.models", "x402srv.server.app", "x402srv.tokens.cache"} <= names


def loaded_after(statement: str) -> list[str]:
    """The modules a fresh interpreter holds after ``statement``."""
    probe = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


@pytest.mark.parametrize("statement", ["import x402srv", "import x402srv.plugin"])
def test_a_plugins_imports_pull_in_neither_sanic_nor_web3(statement: str) -> None:
    heavy = [name for name in loaded_after(statement) if name.split(".")[0] in ("sanic", "web3")]
    assert heavy == []


def test_the_plugin_api_imports_no_built_in_plugin() -> None:
    loaded = loaded_after("import x402srv.plugin")
    assert "x402srv.plugin" in loaded
    assert [name for name in loaded if name.startswith("x402srv.default_plugins")] == []


def test_the_public_names_resolve() -> None:
    """Every name in ``x402srv.__all__`` is there (lazily) and nothing else is advertised."""
    import x402srv

    for name in x402srv.__all__:
        assert getattr(x402srv, name) is not None, name
    assert sorted(dir(x402srv)) == sorted(x402srv.__all__)
