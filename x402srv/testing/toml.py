"""Write the small TOML documents tests and the demo hand to a real server process.

Only what seller configs use: tables, arrays of tables, strings, numbers,
booleans and arrays of scalars. Not a general TOML writer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["dumps"]


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_scalar(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _is_table(value: Any) -> bool:
    return isinstance(value, Mapping) and not _is_inline(value)


def _is_inline(value: Any) -> bool:
    # Secret references stay inline: { env = "NAME" } / { file = "path" }
    return isinstance(value, Mapping) and set(value) <= {"env", "file"} and len(value) == 1


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_is_table(v) for v in value)


def _write(lines: list[str], name: str, table: Mapping[str, Any], header: str) -> None:
    if name:
        lines.append(f"\n{header}")
    for key, value in table.items():
        if not (_is_table(value) or _is_table_array(value)):
            lines.append(f"{json.dumps(key)} = {_scalar(value)}")
    for key, value in table.items():
        path = f"{name}.{json.dumps(key)}" if name else json.dumps(key)
        if _is_table(value):
            _write(lines, path, value, f"[{path}]")
        elif _is_table_array(value):
            for item in value:
                _write(lines, path, item, f"[[{path}]]")


def dumps(document: Mapping[str, Any]) -> str:
    lines: list[str] = []
    _write(lines, "", document, "")
    return "\n".join(lines).lstrip("\n") + "\n"
