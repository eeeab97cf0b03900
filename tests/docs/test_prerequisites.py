"""README and Getting started say the same prerequisites, word for word (issue 30, item 2).

They disagreed: the README said ``./run serve`` needs only Python, while it also runs
``npm ci`` (the console's htmx, anvil for the demo). One paragraph, in both places.
"""

from __future__ import annotations

from tests.support.paths import REPO


def _prerequisites(page: str) -> str:
    text = (REPO / page).read_text()
    start = text.index("**Prerequisites.**")
    return text[start : text.index("Nothing to\nexport first.", start)]


def test_readme_and_getting_started_agree_on_prerequisites() -> None:
    readme = _prerequisites("README.md")
    assert readme == _prerequisites("docs/getting-started.md")
    assert "`npm ci`" in readme  # what ./run serve runs besides pip (./run: node_tools)
    assert "`redis-server` 7+" in readme and "PostgreSQL" in readme  # what ./run test needs
