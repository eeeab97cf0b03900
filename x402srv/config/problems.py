"""Pydantic validation errors as ``(key path, message)`` pairs, said one way everywhere.

The config, plugin option tables, CLI overrides, the payment header and A2A
params all report a refused value by where it is and what is wrong with it;
this is the one reading of pydantic's error list they share.

A value of the wrong type is never converted (docs/configuration.md: config is
strict): ``calls = "50"`` is ``expected an integer, got a string "50"``. The
value itself is shown only for ``config=True`` (the seller's own file, not an
attacker's text), only when it is short, and never under a key that may hold a
secret. Wire input keeps pydantic's words and never shows a value.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Final, get_args

from pydantic import BaseModel, ValidationError

__all__ = ["problems"]

#: What pydantic's type errors expected, in the config's (TOML's) words.
_EXPECTED: Final = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing": "an integer",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "list_type": "an array",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
}
#: Keys whose values are never repeated in an error, even with ``show_values``.
_SECRET_KEY: Final = re.compile(r"(url|dsn|password|secret|keys?|token|auth)$", re.IGNORECASE)
_SHOWN_STRING_LENGTH: Final = 24


#: A union's tag (``Tag("~table")``) names a branch, not a key: paths leave it out.
UNION_TAG: Final = "~"


def _path(location: tuple[int | str, ...]) -> str:
    path = ""
    for part in location:
        if isinstance(part, str) and part.startswith(UNION_TAG):
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _kind(value: Any) -> str:
    """What TOML calls the type of ``value``: ``a string``, ``an integer`` ..."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return "a date or time" if type(value).__module__ == "datetime" else "another type"


def _shown(value: Any, path: str) -> str:
    """`` "50"``, `` true``, `` 1.5``: the value, when it is safe and short; else nothing."""
    if any(_SECRET_KEY.search(part.split("[")[0]) for part in path.split(".")):
        return ""
    if isinstance(value, bool):
        return " " + ("true" if value else "false")
    if isinstance(value, int | float):
        return f" {value!r}"
    if isinstance(value, str) and len(value) <= _SHOWN_STRING_LENGTH and value.isprintable():
        return ' "' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return ""


def _wrong_type(expected: str, item: Any, path: str) -> str:
    if "input" not in item:
        return f"expected {expected}"
    value = item["input"]
    return f"expected {expected}, got {_kind(value)}{_shown(value, path)}"


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: itself, or inside ``X | None``, ``list[X]``, ``Annotated``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in get_args(annotation):
        found = _model_in(argument)
        if found is not None:
            return found
    return None


def _known_keys(model: type[BaseModel], location: tuple[int | str, ...]) -> list[str]:
    """The keys the table at ``location`` (under ``model``) accepts; [] when it is not a model."""
    current: type[BaseModel] | None = model
    for part in location:
        if isinstance(part, int):
            continue  # an element of an array of tables: the same model
        if current is None or part not in current.model_fields:
            return []
        current = _model_in(current.model_fields[part].annotation)
    if current is None:
        return []
    return [field.alias or name for name, field in current.model_fields.items()]


def _unknown_key(location: tuple[int | str, ...], model: type[BaseModel] | None) -> str:
    """ "unknown key", and the closest key the table takes (``unit_amout`` -> ``unit_amount``)."""
    if model is None or not location or not isinstance(location[-1], str):
        return "unknown key"
    known = _known_keys(model, location[:-1])
    close = difflib.get_close_matches(location[-1], known, n=1, cutoff=0.6)
    return f"unknown key (did you mean `{close[0]}`?)" if close else "unknown key"


def problems(
    error: ValidationError, *, config: bool = False, model: type[BaseModel] | None = None
) -> list[tuple[str, str]]:
    """Each failure as ``(path, message)``: ``plans[0].unit_amount``, "unknown key" ...

    ``config``: the seller's TOML (or a CLI override), whose type errors say what
    was expected and what was given. ``model``: the model that was validated,
    so that an unknown key can be answered with the closest key its table takes.
    """
    found = []
    for item in error.errors(include_url=False, include_input=True):
        kind = item.get("type")
        location = tuple(item.get("loc", ()))
        path = _path(location)
        if kind == "extra_forbidden":
            message = _unknown_key(location, model)
        elif kind == "missing":
            message = "required key is missing"
        elif config and kind in _EXPECTED:
            message = _wrong_type(_EXPECTED[kind], item, path)
        else:
            message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        found.append((path, message))
    return found
