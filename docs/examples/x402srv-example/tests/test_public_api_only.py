"""The examples use the public plugin API only, so they break when it does, not when internals move.

The plugins import ``x402srv.plugin``; their tests the test kit ``x402srv.testing``
(and, for a type annotation, the ``Devchain`` its ``devchain`` fixture yields).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1]


def x402srv_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "x402srv" or name.startswith("x402srv.")}


@pytest.mark.parametrize(
    "path", sorted((EXAMPLE / "x402srv_example").glob("*.py")), ids=lambda p: p.name
)
def test_the_plugins_import_x402srv_plugin_only(path: Path) -> None:
    assert x402srv_imports(path) <= {"x402srv.plugin"}


@pytest.mark.parametrize("path", sorted((EXAMPLE / "tests").glob("*.py")), ids=lambda p: p.name)
def test_their_tests_import_the_test_kit_only(path: Path) -> None:
    allowed = {"x402srv.plugin", "x402srv.devchain"}
    for name in x402srv_imports(path) - allowed:
        assert name == "x402srv.testing" or name.startswith("x402srv.testing."), name
