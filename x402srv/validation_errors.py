"""Pydantic validation errors as ``(key path, message)`` pairs, said one way everywhere.

The config, plugin option tables, CLI overrides, the payment header and A2A
params all report a refused value by where it is and what is wrong with it;
this is the one reading of pydantic's error list they share. Input values are
never included (they may be secrets, or an attacker's text).
"""

from __future__ import annotations

from pydantic import ValidationError

__all__ = ["problems"]


def _path(location: tuple[int | str, ...]) -> str:
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def problems(error: ValidationError) -> list[tuple[str, str]]:
    """Each failure as ``(path, message)``: ``plans[0].unit_amount``, "unknown key" ..."""
    found = []
    for item in error.errors(include_url=False, include_input=False):
        kind = item.get("type")
        if kind == "extra_forbidden":
            message = "unknown key"
        elif kind == "missing":
            message = "required key is missing"
        else:
            message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        found.append((_path(tuple(item.get("loc", ()))), message))
    return found
