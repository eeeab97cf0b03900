"""``[siwx]``: sign-in-with-x, access again without paying (docs/sign-in-with-x.md).

On by default: every 402 declares the ``sign-in-with-x`` extension, and a buyer
whose wallet holds a live grant for what it asks proves it by signing the
declared message instead of paying again. ``enabled = false`` declares nothing
and refuses the header (400).
"""

from __future__ import annotations

from pydantic import Field

from x402srv.config.fields import StrictModel

__all__ = ["SiwxConfig"]


class SiwxConfig(StrictModel):
    enabled: bool = True
    #: The line the wallet shows above the message (EIP-4361's statement), if any.
    statement: str | None = Field(default=None, min_length=1, max_length=200, pattern=r"^[^\n]*$")
    #: How long a declared message can be signed and used: its ``expirationTime``
    #: is this long after its ``issuedAt``, and an older message is refused.
    expiration_seconds: int = Field(default=300, ge=30, le=3600)
