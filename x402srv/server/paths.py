"""Request paths as guards and the gateway must read them: every way a server could.

A guard that compares only the raw path can be walked around: the framework
behind it (or the upstream behind a proxy) may percent-decode, resolve ``..``
or treat ``\\`` as ``/`` before routing. So there are two policies here:

- **Guards fail closed** (``is_guarded``): a request is guarded when ANY form
  of its path (raw, decoded once or repeatedly, dot-segments resolved,
  backslashes as slashes) is under a guarded prefix. Over-guarding an odd path
  costs a 401; under-guarding costs the seller's data.
- **The gateway refuses ambiguity** (``gateway_segments``): it forwards a path
  to another server, which will read it its own way, so a path whose meaning
  depends on the reader (encoded ``/`` or ``\\``, dot-segments in any encoding,
  double encoding of those, empty ``//`` segments, control characters) is
  refused with 400 before any route is chosen. What is left reads the same
  everywhere; routes are then matched segment by segment on the decoded form
  (so ``/api`` never matches ``/apix``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final
from urllib.parse import unquote

from x402srv.errors import InvalidRequest

__all__ = ["gateway_segments", "guarded_prefixes", "is_guarded", "path_forms"]

#: Enough for any real double (or triple) encoding; more layers are refused by the gateway.
_MAX_DECODES: Final = 4
_RAW_FORBIDDEN: Final = re.compile(r"[\x00-\x20\x7f\\]")  # never literal in a request target
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
_ESCAPE: Final = re.compile(r"%[0-9A-Fa-f]{2}")


def guarded_prefixes(paths: Sequence[str]) -> tuple[str, ...]:
    """Validated prefixes without trailing slashes ("/" stays "/")."""
    prefixes: list[str] = []
    for path in paths:
        if not path.startswith("/"):
            raise ValueError(f"guarded path {path!r} must start with '/'")
        prefixes.append(path.rstrip("/") or "/")
    if not prefixes:
        raise ValueError("access_guard needs at least one path prefix")
    return tuple(prefixes)


def _normalised(path: str) -> str:
    segments: list[str] = []
    for segment in path.replace("\\", "/").split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if segments:
                segments.pop()
            continue
        segments.append(segment)
    return "/" + "/".join(segments)


def path_forms(path: str) -> set[str]:
    """Every reading of ``path`` a router might route on (see the module docstring)."""
    forms = {path}
    current = path
    for _ in range(_MAX_DECODES):
        decoded = unquote(current, errors="replace")
        if decoded == current:
            break
        forms.add(decoded)
        current = decoded
    forms |= {_normalised(form) for form in forms}
    return forms


def _under(path: str, prefix: str) -> bool:
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


def is_guarded(path: str, prefixes: Sequence[str], *, also: str | None = None) -> bool:
    """Whether any reading of ``path`` (or the matched route ``also``) is under a prefix."""
    forms = path_forms(path)
    if also is not None:
        forms.add(also)
    return any(_under(form, prefix) for form in forms for prefix in prefixes)


def _refuse(detail: str) -> InvalidRequest:
    return InvalidRequest(f"Refused request path: {detail}.")


def _decoded_segment(segment: str) -> str:
    try:
        text = unquote(segment, errors="strict")
    except UnicodeDecodeError:
        raise _refuse("it is not UTF-8 once percent-decoded") from None
    # What a second (third ...) decoding by the upstream would make of it.
    layer = text
    for _ in range(_MAX_DECODES):
        if layer in (".", "..") or "/" in layer or "\\" in layer or _CONTROL.search(layer):
            what = "a dot-segment" if layer in (".", "..") else "a slash or control character"
            raise _refuse(f"a segment decodes to {what}")
        if not _ESCAPE.search(layer):
            return text
        layer = unquote(layer, errors="replace")
    raise _refuse("too many layers of percent-encoding")


def gateway_segments(raw_path: str) -> list[str]:
    """The decoded segments of a raw request path, or ``InvalidRequest`` if it is ambiguous.

    A trailing slash gives a last empty segment (``/api/`` -> ``["api", ""]``);
    empty segments anywhere else (``//``) are refused.
    """
    if not raw_path.startswith("/"):
        raise _refuse("it must start with '/'")
    if _RAW_FORBIDDEN.search(raw_path):
        raise _refuse("backslashes and control characters are not allowed")
    raw_segments = raw_path[1:].split("/")
    decoded: list[str] = []
    for index, segment in enumerate(raw_segments):
        if not segment and index != len(raw_segments) - 1:
            raise _refuse("empty segments ('//') are not allowed")
        decoded.append(_decoded_segment(segment))
    return decoded
