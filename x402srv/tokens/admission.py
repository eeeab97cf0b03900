"""From ``Authorization`` header values to verified claims, or to the problem to answer.

Every integration (the Sanic guard, the ASGI middleware, the gateway, a Flask
view) asks the same question and must refuse the same way, so the answer is
decided here and each adapter only writes it out:

- no, several, non-Bearer or malformed ``Authorization`` -> ``InvalidToken`` (401);
- a token the verifier refuses -> ``InvalidToken`` / ``TokenExpired`` (401);
- keys that cannot be fetched -> ``KeySourceUnavailable`` (503, a warning);
- no revocation list to check the token against (never read, or older than
  the verifier allows) -> ``RevocationsUnavailable`` (503, a warning): the
  token may be good, so not a 401, and never let through;
- anything unexpected -> ``InternalError`` (500; logged with the traceback,
  the client learns nothing about keys or URLs).
"""

from __future__ import annotations

import logging
import string
from collections.abc import Sequence
from typing import Final

from x402srv.errors import (
    InternalError,
    InvalidToken,
    KeySourceUnavailable,
    ProblemError,
    RevocationsUnavailable,
)
from x402srv.server import metrics
from x402srv.tokens.verify import AccessClaims, TokenVerifier

__all__ = ["admit", "admit_sync", "bearer_token"]

#: RFC 6750 2.1 b64token: ``1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="``.
_B64TOKEN_CHARS: Final = (string.ascii_letters + string.digits + "-._~+/").encode("ascii")

log = logging.getLogger("x402srv.tokens.admission")


def bearer_token(authorization: Sequence[str]) -> str:
    """The token of exactly one ``Authorization: Bearer <token>`` value, else ``InvalidToken``.

    ``authorization`` is every value of the header the request carried (a
    second header is refused rather than guessed between).
    """
    token = _credentials(authorization)
    if not _is_b64token(token):
        raise InvalidToken("The access token is malformed.")
    return token


def _credentials(authorization: Sequence[str]) -> str:
    """``bearer_token`` without the b64token check: ``admit`` leaves that to the verifier.

    A ``TokenVerifier`` refuses, before it decodes anything, whatever is not in
    compact JWS form (base64url and dots: a strict subset of b64token), and its
    cache of verified tokens holds only text that passed. Checking the form here
    too would cost a pass over ~600 bytes on every call for nothing.
    """
    if not authorization:
        raise InvalidToken("An access token is required (Authorization: Bearer <token>).")
    if len(authorization) > 1:
        raise InvalidToken("Send exactly one Authorization header.")
    scheme, _, credentials = authorization[0].strip().partition(" ")
    if scheme.lower() != "bearer":
        raise InvalidToken("The Authorization scheme must be Bearer.")
    return credentials.strip(" ")


def _is_b64token(token: str) -> bool:
    """Whether ``token`` is an RFC 6750 b64token.

    Deleting every allowed byte must leave nothing: ``bytes.translate`` does it
    in one C pass, several times faster than a regex over a token's ~600
    characters, on every guarded call.
    """
    body = token.rstrip("=")
    return (
        bool(body) and body.isascii() and not body.encode("ascii").translate(None, _B64TOKEN_CHARS)
    )


def _refusal(err: Exception) -> ProblemError:
    refusal = _classify(err)
    metrics.current().token_rejected(refusal.code)
    return refusal


def _classify(err: Exception) -> ProblemError:
    if isinstance(err, InvalidToken):
        return err
    if isinstance(err, KeySourceUnavailable | RevocationsUnavailable):
        # Per request; the source itself logs each failed fetch (at a bounded rate).
        log.warning("cannot verify access tokens: %s", err.detail)
        return err
    # A broken verifier or key source is the seller's problem: log it, tell the client nothing.
    log.error("token verification failed unexpectedly", exc_info=err)
    return InternalError()


async def admit(
    verifier: TokenVerifier, authorization: Sequence[str]
) -> AccessClaims | ProblemError:
    """The verified claims, or the error to answer with (never raises for a bad request)."""
    try:
        return await verifier.verify(_credentials(authorization))
    except Exception as err:
        return _refusal(err)


def admit_sync(
    verifier: TokenVerifier, authorization: Sequence[str]
) -> AccessClaims | ProblemError:
    """``admit`` for sync code; the verifier's key source must be a ``SyncKeySource``."""
    try:
        return verifier.verify_sync(_credentials(authorization))
    except Exception as err:
        return _refusal(err)
