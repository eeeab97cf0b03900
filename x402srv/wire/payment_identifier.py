"""The 402's ``payment-identifier`` declaration (docs/payment-identifier.md).

Every 402 declares it, as the official SDKs' ``declare_payment_identifier_extension``
does: ``info.required`` and the schema of the id a buyer may add. What a payment's
id then does is ``x402srv.access.payment_ids``.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["PAYMENT_IDENTIFIER", "SCHEMA", "declaration"]

PAYMENT_IDENTIFIER: Final = "payment-identifier"

#: What the official SDKs' ``declare_payment_identifier_extension`` puts beside ``info``.
SCHEMA: Final[dict[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "required": {"type": "boolean"},
        "id": {"type": "string", "minLength": 16, "maxLength": 128, "pattern": "^[a-zA-Z0-9_-]+$"},
    },
    "required": ["required"],
}


def declaration(required: bool) -> dict[str, Any]:
    """The 402's ``extensions["payment-identifier"]``."""
    return {"info": {"required": required}, "schema": SCHEMA}
