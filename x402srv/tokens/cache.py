"""Access tokens a ``TokenVerifier`` already verified, so a buyer's next call skips the work.

A buyer pays once and then calls the seller's API many times with the same
token; decoding it and checking its signature and claims again on every call
was most of the guard's cost. A token that passed every check is kept here,
keyed by its exact text (signature included, so only the very same token
hits), with the claims it verified to. On a hit only what can change with time
is checked again: expiry, against the verifier's clock and leeway.

Nothing that failed is kept (a bad token costs a full check every time, as
before), entries are dropped after ``ttl`` seconds so that keys a JWKS source
stops publishing stop being honoured within that time, and the map is bounded
(the oldest entry leaves first).
"""

from __future__ import annotations

import threading
from typing import Final

from x402srv.errors import TokenExpired
from x402srv.tokens.claims import AccessClaims

__all__ = ["DEFAULT_ENTRIES", "DEFAULT_TTL_SECONDS", "VerifiedTokens"]

DEFAULT_ENTRIES: Final = 10_000
DEFAULT_TTL_SECONDS: Final = 60.0


class VerifiedTokens:
    def __init__(self, *, entries: int = DEFAULT_ENTRIES, ttl: float = DEFAULT_TTL_SECONDS) -> None:
        self._entries = entries
        self._ttl = ttl
        self._verified: dict[str, tuple[AccessClaims, float]] = {}
        self._lock = threading.Lock()  # sync verifiers may share one from several threads

    def get(self, token: str, now: float, leeway: float) -> AccessClaims | None:
        """The claims of ``token`` if it was verified within ``ttl``; raises once it expired."""
        found = self._verified.get(token)
        if found is None:
            return None
        claims, verified_at = found
        if now - verified_at > self._ttl or now < verified_at:
            self._verified.pop(token, None)
            return None
        if claims.expires_at <= now - leeway:
            self._verified.pop(token, None)
            raise TokenExpired("The access token has expired.")
        return claims

    def put(self, token: str, claims: AccessClaims, now: float) -> None:
        with self._lock:
            if len(self._verified) >= self._entries:
                self._verified.pop(next(iter(self._verified)))
            self._verified[token] = (claims, now)
