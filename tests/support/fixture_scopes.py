"""Which scope is starting a process now: a pytest plugin (the root ``conftest.py`` loads it).

``current_scope()`` is the scope of the innermost fixture being set up, or
``"function"`` when none is (a test's own body). ``tests/conftest.py`` uses it
to stop a seller at the end of the scope that started it. The hook has to live
in a plugin: a hook in ``tests/conftest.py`` is not called for session-scoped
fixtures, which pytest sets up for the session, outside that directory.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

__all__ = ["current_scope"]

#: The scopes of the fixtures being set up right now, innermost last.
_SETTING_UP: list[str] = []


def current_scope() -> str:
    """``"session"``, ``"package"``, ``"module"``, ``"class"`` or ``"function"``."""
    return _SETTING_UP[-1] if _SETTING_UP else "function"


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any]) -> Generator[None, object, object]:
    _SETTING_UP.append(fixturedef.scope)
    try:
        return (yield)
    finally:
        _SETTING_UP.pop()
