"""What every config model shares: the strict frozen base, addresses and URLs.

Its own module so that ``models`` and ``networks`` (the ``[[networks]]``
tables, which ``models`` includes) validate the same way without importing
each other.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from eth_utils.address import is_checksum_address, to_checksum_address
from pydantic import BaseModel, ConfigDict

__all__ = ["PluginOptions", "StrictModel", "checksum_address", "http_url"]

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")


class StrictModel(BaseModel):
    """Unknown keys are errors, no value is converted to another type, and it never changes.

    ``strict``: ``calls = "50"`` or ``refund_on_5xx = "no"`` is refused, not read
    as 50 and false; an integer key takes no float or boolean (docs/configuration.md).
    A float key takes an integer (``cooldown_seconds = 30``): TOML has no other way
    to write a whole number of seconds.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class PluginOptions(StrictModel):
    """The base of a plugin's option table (``ctx.parse_options(MyOptions)``).

    Strict like the core's tables: a typo or a value of the wrong type stops the
    server with its key path instead of being ignored or converted. A ``Path``
    field needs ``Field(strict=False)`` (TOML gives a string).
    """


def checksum_address(value: str) -> str:
    """A 20-byte hex address in its EIP-55 form; a mixed-case one must already be that."""
    if not _ADDRESS.fullmatch(value):
        raise ValueError("must be a 0x-prefixed 20-byte hex address")
    body = value[2:]
    if body != body.lower() and body != body.upper() and not is_checksum_address(value):
        raise ValueError("mixed-case address with a wrong EIP-55 checksum")
    return str(to_checksum_address(value))


def http_url(value: str, *, trailing_slash: bool = True) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http(s) URL")
    if not trailing_slash and value.endswith("/"):
        raise ValueError("must not end with '/'")
    if not trailing_slash and (parts.query or parts.fragment):
        raise ValueError("must not have a query or fragment")
    return value
