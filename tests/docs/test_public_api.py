"""The docs teach the public API only, so a reader never copies an import that may break.

A seller's code imports ``x402srv`` (its ``__all__``); a plugin imports
``x402srv.plugin`` (its ``__all__``) and tests with ``x402srv.testing``.
Everything else is internal (``x402srv/__init__.py``) and moves between
releases, as issue 24's regrouping did. This checks every sample file, and
every Python block written into a page, the way the example plugins check
themselves (``docs/examples/x402srv-example/tests/test_public_api_only.py``).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.support.paths import REPO

DOCS = REPO / "docs"
SAMPLES = sorted((DOCS / "samples").glob("*.py"))
PAGES = [
    REPO / "README.md",
    REPO / "CONTRIBUTING.md",
    *sorted(p for p in DOCS.rglob("*.md") if "site" not in p.parts),
]
PYTHON_BLOCK = re.compile(r"^( *)```(?:python|py)\s*\n(.*?)^\1```\s*$", re.MULTILINE | re.DOTALL)
#: The modules a reader may be shown, and the names they may take from each.
PUBLIC = ("x402srv", "x402srv.plugin")
TEST_KIT = "x402srv.testing"


def exported(module: str) -> set[str]:
    return set(importlib.import_module(module).__all__)


def internal_uses(source: str, where: str) -> list[str]:
    """Every import of, or attribute path into, x402srv that leaves the public API."""
    tree = ast.parse(source, where)
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            module = node.module
            if module in PUBLIC:
                public = exported(module)
                found += [f"{module}.{a.name}" for a in node.names if a.name not in public]
            elif module.startswith("x402srv.") and not _is_test_kit(module):
                found.append(f"from {module} import ...")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                if name.startswith("x402srv.") and name not in PUBLIC and not _is_test_kit(name):
                    found.append(f"import {name}")
        elif (
            isinstance(node, ast.Attribute)
            and id(node) not in inner  # the whole path, once
            and _dotted(node).startswith("x402srv.")
        ):
            # x402srv.tokens.verify.TokenVerifier written out in code
            first = _dotted(node).split(".")[1]
            if first not in exported("x402srv") and first not in ("plugin", "testing"):
                found.append(_dotted(node))
    return found


def _is_test_kit(module: str) -> bool:
    return module == TEST_KIT or module.startswith(TEST_KIT + ".")


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def page_blocks() -> list[tuple[str, str]]:
    """(``page:line``, code) for every Python block written into a page that names x402srv."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in PYTHON_BLOCK.finditer(text):
            indent = len(match[1])
            code = "\n".join(line[indent:] for line in match[2].splitlines())
            if "x402srv" in code and "--8<--" not in code:
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{page.relative_to(REPO)}:{line}", code))
    return found


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_sample_imports_public_names_only(path: Path) -> None:
    assert internal_uses(path.read_text(), str(path)) == []


@pytest.mark.parametrize(("where", "code"), page_blocks(), ids=[w for w, _ in page_blocks()])
def test_every_block_in_a_page_imports_public_names_only(where: str, code: str) -> None:
    assert internal_uses(code, where) == []


def test_the_check_sees_an_internal_import() -> None:
    """The rule itself: a deep import, a private name and a written-out path are all caught."""
    code = (
        "from x402srv.tokens.verify import TokenVerifier\n"
        "from x402srv import Config, check_routes\n"
        "from x402srv.plugin import BaseSettler\n"
        "from x402srv.testing import StoreContract\n"
        "import x402srv\n"
        "x402srv.config.models.load_config('x.toml')\n"
    )
    assert internal_uses(code, "<test>") == [
        "from x402srv.tokens.verify import ...",
        "x402srv.check_routes",
        "x402srv.config.models.load_config",
    ]
