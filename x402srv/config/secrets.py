"""Secret values in the TOML: a string, ``{ env = "NAME" }`` or ``{ file = "path" }``.

The rules: docs/protocol/config.md, "Secrets".

A ``Secret`` never shows itself in ``repr``, logs or ``check`` output; URLs that
are secrets (RPC and facilitator URLs carry API keys) are shown only through
``redact_url``. Its own module, so that every config model (``models``, the
gateway's ``routes``) can use it without importing the other.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, PlainSerializer, PlainValidator, ValidationInfo

__all__ = [
    "HttpUrlSecret",
    "Secret",
    "SecretValue",
    "redact_url",
    "shown_url",
    "url_secret",
    "validation_context",
]


class Secret:
    """A secret value that never shows itself in repr, logs or ``check`` output."""

    __slots__ = ("_value", "source")

    def __init__(self, value: str, source: str = "inline") -> None:
        self._value = value
        self.source = source

    def reveal(self) -> str:
        return self._value

    def describe(self) -> str:
        return f"<secret: {self.source}>"

    def __repr__(self) -> str:
        return f"Secret({self.source})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def validation_context(info: ValidationInfo) -> tuple[Path, Mapping[str, str]]:
    """The config file's directory and the environment a model validates against."""
    ctx = info.context or {}
    return Path(ctx.get("base_dir", ".")), ctx.get("env", os.environ)


def _parse_secret(value: Any, info: ValidationInfo) -> Secret:
    if isinstance(value, Secret):
        return value
    if isinstance(value, str):
        if not value:
            raise ValueError("must not be empty")
        return Secret(value, "inline")
    if isinstance(value, dict) and len(value) == 1:
        base_dir, env = validation_context(info)
        if "env" in value and isinstance(value["env"], str):
            name = value["env"]
            found = env.get(name)
            if found is None:
                raise ValueError(f"environment variable {name} is not set")
            if not found.strip():  # set, to nothing: a different mistake with a different fix
                raise ValueError(f"environment variable {name} is set but empty")
            return Secret(found, f"env {name}")
        if "file" in value and isinstance(value["file"], str):
            path = Path(value["file"])
            path = path if path.is_absolute() else base_dir / path
            try:
                text = path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ValueError(f"cannot read secret file {path}: {exc.strerror}") from None
            if not text:
                raise ValueError(f"secret file {path} is empty")
            return Secret(text, f"file {value['file']}")
    raise ValueError('must be a string, { env = "NAME" } or { file = "path" }')


SecretValue = Annotated[
    Secret,
    PlainValidator(_parse_secret),
    PlainSerializer(lambda s: s.describe(), return_type=str),
]


def redact_url(url: str) -> str:
    """Scheme, host and port only: RPC and facilitator URLs often carry API keys."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a non-numeric "port" may be a key itself: hide it with the rest
        return f"{parts.scheme}://{host}/<redacted>"
    hidden = parts.username or parts.password or parts.path.strip("/") or parts.query
    return f"{parts.scheme}://{host}{port}" + ("/<redacted>" if hidden else "")


#: Path segments a log line shows as they are: lowercase words (``facilitator``,
#: ``platform``) and short versions (``v2``, ``x402``). Anything else may be a key
#: (``/v2/<key>`` is how RPC and some facilitator providers take theirs).
_WORD_SEGMENT = re.compile(r"[a-z]{1,32}(?:[-_.][a-z]{1,32}){0,3}|[a-z]{0,4}\d{1,3}")


def shown_url(url: str) -> str:
    """A URL for a log line: its path where it reads as words; credentials never.

    ``https://x402.org/facilitator`` is shown whole (a seller running several
    facilitators tells them apart by path); a user-info part, the query and any
    path segment that is not a plain word or version (a key, a token, an id)
    are ``<redacted>``. ``redact_url`` (scheme, host and port only) stays the
    rule for RPC URLs, whose paths are keys more often than not.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a non-numeric "port" may be a key itself: hide it with the rest
        return f"{parts.scheme}://{host}/<redacted>"
    user = "<redacted>@" if parts.username or parts.password else ""
    segments = [
        part if not part or _WORD_SEGMENT.fullmatch(part) else "<redacted>"
        for part in parts.path.split("/")
    ]
    path = "/".join(segments).rstrip("/")
    query = "?<redacted>" if parts.query else ""
    return f"{parts.scheme}://{user}{host}{port}{path}{query}"


def _valid_url(secret: Secret, schemes: tuple[str, ...], hosts_listed: tuple[str, ...]) -> Secret:
    """A URL-valued secret must parse; the error never repeats the value.

    A scheme in ``hosts_listed`` names several ``host:port`` pairs separated by
    commas (``redis+sentinel://h1:26379,h2:26379/...``), which ``urlsplit``
    cannot take apart: only its scheme and a non-empty host list are checked
    here, the plugin that reads it checks the rest.
    """
    scheme, _, rest = secret.reveal().partition("://")
    if scheme.lower() in hosts_listed:
        if not rest.partition("/")[0].rpartition("@")[2]:
            raise ValueError(f"must be a {scheme.lower()} URL with hosts (value not shown)")
        return secret
    try:
        parts = urlsplit(secret.reveal())
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise ValueError("is not a valid URL (value not shown)") from None
    if parts.scheme not in schemes or not parts.hostname:
        raise ValueError(f"must be a {'/'.join(schemes)} URL with a host (value not shown)")
    return secret


def url_secret(*schemes: str, hosts_listed: tuple[str, ...] = ()) -> Any:
    def check(secret: Secret) -> Secret:
        return _valid_url(secret, schemes, hosts_listed)

    return AfterValidator(check)


HttpUrlSecret = Annotated[SecretValue, url_secret("http", "https")]
