"""What every config model shares: the strict frozen base, addresses and URLs.

Its own module so that ``config`` and ``network_config`` (the ``[[networks]]``
tables, which ``config`` includes) validate the same way without importing
each other.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from eth_utils.address import is_checksum_address, to_checksum_address
from pydantic import BaseModel, ConfigDict

__all__ = ["StrictModel", "checksum_address", "http_url"]

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")


class StrictModel(BaseModel):
    """Unknown keys are errors; a validated config never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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
