"""What a verified access token says: ``AccessClaims``, the one type verifier and cache share.

It lives apart from ``x402srv.tokens.verify`` (which produces it) so that
``x402srv.tokens.cache`` (which keeps it) imports neither the other way round.
Public as ``x402srv.AccessClaims``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["AccessClaims"]


@dataclass(frozen=True, slots=True)
class AccessClaims:
    """A verified access token, as the seller's handlers see it (``request.ctx.x402``).

    Times are seconds since the epoch. ``audience`` is the audience the token
    was accepted for; ``claims`` is every claim as signed.
    """

    request_id: str
    challenge_id: str
    resource_id: str
    plan_id: str
    tx_hash: str
    payer: str | None
    issued_at: float
    expires_at: float
    issuer: str
    audience: str
    claims: Mapping[str, Any]
