"""Where a key path is written in a TOML file: the line a config error points at.

``tomllib`` keeps no positions, so the source text is scanned once: table
headers (``[server]``, ``[[plans]]``, ``[[networks.settlers]]``, counting each
array's elements the way the parsed document does) and ``key = value`` lines
(dotted and quoted keys included) each give the line of the path they start.
An error's key path is then looked up as is, else its longest written prefix
(a missing key points at its table's header; ``credentials.secret.env``
inside an inline table at ``credentials.secret``).

Best effort, by design (docs/configuration.md, "Errors"): multi-line strings
and arrays are skipped over, not parsed, and a path the scan cannot place gets
no line rather than a wrong one.
"""

from __future__ import annotations

import re

__all__ = ["key_lines", "line_of", "locate"]

_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"|\'[^\']*\''
_KEY = rf"(?:{_BARE}|{_QUOTED})(?:\s*\.\s*(?:{_BARE}|{_QUOTED}))*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_KEY})\s*\]\]?\s*(?:#.*)?$")
_ASSIGN = re.compile(rf"^\s*({_KEY})\s*=")
_PART = re.compile(rf"{_BARE}|{_QUOTED}")
#: A key path at the start of an error line: ``plans[0].unit_amount: ...``.
_PATH_AT_START = re.compile(r"^(\s*)([A-Za-z_][\w-]*(?:\[\d+\])?(?:\.[\w-]+(?:\[\d+\])?)*): ")


def _parts(key: str) -> list[str]:
    return [p[1:-1] if p[0] in "\"'" else p for p in _PART.findall(key)]


def _joined(parts: list[str | int]) -> str:
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path


def key_lines(source: str) -> dict[str, int]:
    """Every key path the text writes, with the (1-based) line it is written on."""
    found: dict[str, int] = {}
    table: list[str | int] = []
    counts: dict[str, int] = {}
    open_brackets = 0
    in_string: str | None = None
    for number, line in enumerate(source.splitlines(), start=1):
        if in_string is not None:  # inside a multi-line string: look for its end only
            if line.count(in_string) % 2 == 1:
                in_string = None
            continue
        if open_brackets > 0:  # inside a multi-line array
            open_brackets += line.count("[") - line.count("]")
            continue
        header = _HEADER.match(line)
        if header is not None:
            names: list[str | int] = list(_parts(header.group(2)))
            if header.group(1) == "[[":
                array = [*_resolved(names[:-1], counts), names[-1]]
                counts[_joined(array)] = counts.get(_joined(array), -1) + 1
                table = [*array, counts[_joined(array)]]
            else:
                table = _resolved(names, counts)
            found.setdefault(_joined(table), number)
            continue
        assign = _ASSIGN.match(line)
        if assign is None:
            continue
        path = _joined([*table, *_parts(assign.group(1))])
        found.setdefault(path, number)
        value = line[assign.end() :]
        for quote in ('"""', "'''"):
            if value.count(quote) % 2 == 1:
                in_string = quote
        if value.lstrip().startswith("["):
            open_brackets = value.count("[") - value.count("]")
    return found


def _resolved(names: list[str | int], counts: dict[str, int]) -> list[str | int]:
    """``networks.settlers`` under the current ``[[networks]]`` element (``networks[1]``)."""
    resolved: list[str | int] = []
    for name in names:
        resolved.append(name)
        index = counts.get(_joined(resolved))
        if index is not None:
            resolved.append(index)
    return resolved


def line_of(path: str, lines: dict[str, int]) -> int | None:
    """The line of ``path``, else of its longest written prefix; None when nothing matches."""
    candidate = path
    while candidate:
        if candidate in lines:
            return lines[candidate]
        cut = max(candidate.rfind("."), candidate.rfind("["))
        candidate = candidate[:cut] if cut > 0 else ""
    return None


def locate(message: str, source: str, file: str) -> str:
    """``message`` with ``file:LINE:`` before each line that starts with a key path it places.

    A message about the file itself (``seller.toml: not valid TOML ...``, which
    names its own line) is left as it is.
    """
    if message.startswith(f"{file}:"):
        return message
    lines = key_lines(source)
    shown = []
    for text in message.removeprefix("invalid configuration:").lstrip(" ").splitlines():
        match = _PATH_AT_START.match(text)
        number = line_of(match.group(2), lines) if match else None
        if match and number is not None:
            text = f"{match.group(1)}{file}:{number}: {text[len(match.group(1)) :]}"
        shown.append(text)
    return "\n".join(shown)
