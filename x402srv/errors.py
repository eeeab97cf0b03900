"""One exception tree for x402srv, with stable problem codes (docs/errors.md).

Two families are kept apart on purpose (as pyjwt keeps ``InvalidKeyError``
apart from ``InvalidTokenError``): the *seller* misconfigured something, or a
*client* sent something we refuse. The first stops the server at start-up; the
second becomes an RFC 9457 problem document and never a 500.

    X402SrvError
    ├── ConfigError                  server misconfigured (exit code 2); names the key path
    │   └── PluginNotFound           the TOML names a plugin nobody registered
    └── ProblemError                 answered to the client as problem+json
        ├── InvalidRequest           400 INVALID_REQUEST
        │   └── UnsupportedMediaType 415 INVALID_REQUEST
        ├── TierNotFound             400 TIER_NOT_FOUND
        ├── SiwxInvalid              400 SIWX_INVALID, a malformed SIGN-IN-WITH-X header
        ├── InvalidToken             401 INVALID_TOKEN
        │   ├── TokenExpired         401 TOKEN_EXPIRED
        │   └── TokenRevoked         401 TOKEN_REVOKED, the seller revoked the grant
        ├── AdminUnauthorized        401 ADMIN_UNAUTHORIZED, console/admin API credential
        ├── PaymentFailed            402 PAYMENT_FAILED (+ x402 ``reason``)
        ├── CreditsExhausted         402 CREDITS_EXHAUSTED, a grant's calls are spent (+ RateLimit)
        ├── AdminForbidden           403 ADMIN_FORBIDDEN, a console form without its CSRF token
        ├── SiwxRejected             403 SIWX_REJECTED, a sign-in that proves nothing here
        ├── NotFound                 404 NOT_FOUND
        ├── MethodNotAllowed         405 METHOD_NOT_ALLOWED
        ├── TxAlreadyRedeemed        409 TX_ALREADY_REDEEMED
        ├── RequestIdConflict        409 REQUEST_ID_CONFLICT
        ├── PaymentIdConflict        409 PAYMENT_ID_CONFLICT, a payment id bound to another payment
        ├── SiwxNonceUsed            409 SIWX_NONCE_USED, a sign-in message used before
        ├── SettlementInProgress     409 SETTLEMENT_IN_PROGRESS (+ Retry-After)
        ├── StateConflict            409 STATE_CONFLICT, admin: not in a state that allows it
        ├── ChallengeExpired         410 CHALLENGE_EXPIRED
        ├── GrantRevoked             410 GRANT_REVOKED, a revoked purchase asked for again
        │   └── GrantRefunded        410 GRANT_REFUNDED, its money went back (+ the refund's txHash)
        ├── RateLimited              429 RATE_LIMITED, too many unpaid requests (+ Retry-After)
        │   └── CallsThrottled       429 RATE_LIMITED, a grant's rate limit (+ RateLimit)
        ├── InternalError            500 INTERNAL_ERROR
        │   └── CredentialPending    500 INTERNAL_ERROR, paid but no credential yet (+ Retry-After)
        ├── SettlementPending        502 SETTLEMENT_PENDING (+ Retry-After)
        ├── UpstreamUnavailable      502 UPSTREAM_UNAVAILABLE, gateway upstream refused/broke
        ├── StoreUnavailable         503 STORE_UNAVAILABLE (+ Retry-After)
        ├── SettlerUnavailable       503 SETTLER_UNAVAILABLE, no settler reachable (+ Retry-After)
        ├── NotReady                 503 NOT_READY, /readyz: a dependency is down
        ├── KeySourceUnavailable     503 KEY_SOURCE_UNAVAILABLE, token keys (JWKS) unreachable
        ├── RevocationsUnavailable   503 REVOCATIONS_UNAVAILABLE, no list read yet (+ Retry-After)
        ├── SiwxUnavailable          503 SIWX_UNAVAILABLE, a wallet contract's RPC is down
        └── UpstreamTimeout          504 UPSTREAM_TIMEOUT, gateway upstream too slow

Plugins convert their library's exceptions (web3, redis, jwt, httpx) into
these at their boundary; nothing else may reach a client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "AdminForbidden",
    "AdminUnauthorized",
    "CallsThrottled",
    "ChallengeExpired",
    "ConfigError",
    "CredentialPending",
    "CreditsExhausted",
    "GrantRefunded",
    "GrantRevoked",
    "InternalError",
    "InvalidRequest",
    "InvalidToken",
    "KeySourceUnavailable",
    "MethodNotAllowed",
    "NotFound",
    "NotReady",
    "PaymentFailed",
    "PaymentIdConflict",
    "PluginNotFound",
    "ProblemError",
    "RateLimited",
    "RequestIdConflict",
    "RevocationsUnavailable",
    "SettlementInProgress",
    "SettlementPending",
    "SettlerUnavailable",
    "SiwxInvalid",
    "SiwxNonceUsed",
    "SiwxRejected",
    "SiwxUnavailable",
    "StateConflict",
    "StoreUnavailable",
    "TierNotFound",
    "TokenExpired",
    "TokenRevoked",
    "TxAlreadyRedeemed",
    "UnsupportedMediaType",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "X402SrvError",
]


class X402SrvError(Exception):
    """Root of every error x402srv raises on purpose."""


class ConfigError(X402SrvError):
    """The seller's configuration is unusable; the message names the key path."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class PluginNotFound(ConfigError):
    """The TOML selects a plugin name that no installed plugin registered."""


class ProblemError(X402SrvError):
    """An error answered to the client as RFC 9457 problem details.

    ``detail`` is written for the client: it must never hold secrets, RPC URLs,
    stack traces or raw upstream bodies.
    """

    status: ClassVar[int] = 500
    code: ClassVar[str] = "INTERNAL_ERROR"
    title: ClassVar[str] = "Internal error"

    def __init__(
        self,
        detail: str | None = None,
        *,
        retry_after: int | None = None,
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.detail = detail or self.title
        self.retry_after = retry_after
        self.extra: dict[str, Any] = dict(extra or {})
        self._headers = dict(headers or {})
        super().__init__(self.detail)

    def to_problem(self) -> dict[str, Any]:
        """The problem document; extension members come after the standard ones."""
        body: dict[str, Any] = {
            "type": "about:blank",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
        }
        for key, value in self.extra.items():
            body.setdefault(key, value)
        return body

    def headers(self) -> dict[str, str]:
        """Response headers that carry part of the answer (Retry-After, WWW-Authenticate)."""
        headers = dict(self._headers)
        if self.retry_after is not None:
            headers["Retry-After"] = str(max(1, int(self.retry_after)))
        return headers


class InvalidRequest(ProblemError):
    """A malformed body, header, JSON value or field; a body over 64 KiB, a header over 8 KiB."""

    status = 400
    code = "INVALID_REQUEST"
    title = "Invalid request"


class UnsupportedMediaType(InvalidRequest):
    """The body is not JSON (``Content-Type``)."""

    status = 415
    title = "Unsupported media type"


class TierNotFound(ProblemError):
    """The ``planId`` matches no plan (or a payment names none)."""

    status = 400
    code = "TIER_NOT_FOUND"
    title = "Plan not found"


class SiwxInvalid(ProblemError):
    """A ``SIGN-IN-WITH-X`` header that is not a sign-in (docs/sign-in-with-x.md): malformed
    base64 or JSON, a field missing or of the wrong type, or a seller that takes none."""

    status = 400
    code = "SIWX_INVALID"
    title = "Invalid sign-in"


class SiwxRejected(ProblemError):
    """A sign-in that proves nothing here: another domain, URI or plan than it was declared
    for, expired or too old, or a signature the wallet did not make."""

    status = 403
    code = "SIWX_REJECTED"
    title = "Sign-in rejected"


class SiwxNonceUsed(ProblemError):
    """The sign-in's nonce was used before (a replay, or the loser of two racing requests):
    ask again for a 402 and sign its fresh message."""

    status = 409
    code = "SIWX_NONCE_USED"
    title = "Sign-in already used"


class SiwxUnavailable(ProblemError):
    """A contract wallet's sign-in needs its network's RPC, which did not answer: retry."""

    status = 503
    code = "SIWX_UNAVAILABLE"
    title = "Sign-in cannot be checked now"


class InvalidToken(ProblemError):
    """The guard refused the bearer token: missing, malformed, wrongly signed, not for us."""

    status = 401
    code = "INVALID_TOKEN"
    title = "Invalid access token"

    def headers(self) -> dict[str, str]:
        headers = super().headers()
        headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
        return headers


class TokenExpired(InvalidToken):
    """The bearer token is past its ``exp``."""

    code = "TOKEN_EXPIRED"
    title = "Access token expired"


class TokenRevoked(InvalidToken):
    """The seller revoked the grant this token belongs to (``x402srv.tokens.revocation``)."""

    code = "TOKEN_REVOKED"
    title = "Access token revoked"


class AdminUnauthorized(ProblemError):
    """The console or admin API was asked without a valid admin credential.

    A buyer's access token is never one: the console has a credential of its own.
    """

    status = 401
    code = "ADMIN_UNAUTHORIZED"
    title = "Admin credential required"

    def headers(self) -> dict[str, str]:
        headers = super().headers()
        headers["WWW-Authenticate"] = 'Bearer realm="x402srv-admin"'
        return headers


class AdminForbidden(ProblemError):
    """A console form was posted without the CSRF token of the session that shows it."""

    status = 403
    code = "ADMIN_FORBIDDEN"
    title = "Forbidden"


class PaymentFailed(ProblemError):
    """Verification or settlement refused the payment; ``reason`` is the x402 reason string."""

    status = 402
    code = "PAYMENT_FAILED"
    title = "Payment failed"

    def __init__(self, reason: str, detail: str | None = None, **kwargs: Any) -> None:
        self.reason = reason
        extra = dict(kwargs.pop("extra", None) or {})
        extra["reason"] = reason
        super().__init__(detail, extra=extra, **kwargs)


class CreditsExhausted(ProblemError):
    """A metered call found its grant's credits spent: pay the plan again to top the grant up.

    The gateway answers with the plan's 402 offer (a standard x402 client pays
    it and keeps its token); an app's meter answers this problem with a
    ``topUp`` member: the request that tops the grant up at ``/x402/access``.
    """

    status = 402
    code = "CREDITS_EXHAUSTED"
    title = "Credits exhausted"


class NotFound(ProblemError):
    """No such route."""

    status = 404
    code = "NOT_FOUND"
    title = "Not found"


class MethodNotAllowed(ProblemError):
    """The route exists, the method does not."""

    status = 405
    code = "METHOD_NOT_ALLOWED"
    title = "Method not allowed"


class TxAlreadyRedeemed(ProblemError):
    """The payment or txHash already belongs to another challenge."""

    status = 409
    code = "TX_ALREADY_REDEEMED"
    title = "Payment already redeemed"


class RequestIdConflict(ProblemError):
    """The ``requestId`` is already used for another plan or resource."""

    status = 409
    code = "REQUEST_ID_CONFLICT"
    title = "Request id conflict"


class PaymentIdConflict(ProblemError):
    """The payment's ``payment-identifier`` id is already bound to another payment."""

    status = 409
    code = "PAYMENT_ID_CONFLICT"
    title = "Payment id conflict"


class SettlementInProgress(ProblemError):
    """Another request is settling this challenge now: send the same one after ``Retry-After``."""

    status = 409
    code = "SETTLEMENT_IN_PROGRESS"
    title = "Settlement in progress"


class StateConflict(ProblemError):
    """Admin API: the record is not in a state that allows this (cancel, revoke)."""

    status = 409
    code = "STATE_CONFLICT"
    title = "State conflict"


class ChallengeExpired(ProblemError):
    """The challenge expired or was cancelled."""

    status = 410
    code = "CHALLENGE_EXPIRED"
    title = "Challenge expired"


class GrantRevoked(ProblemError):
    """The purchase was delivered, and the seller has revoked its grant since."""

    status = 410
    code = "GRANT_REVOKED"
    title = "Grant revoked"


class GrantRefunded(GrantRevoked):
    """The purchase's money went back to the buyer (docs/refunds.md); ``txHash`` is the refund's."""

    status = 410
    code = "GRANT_REFUNDED"
    title = "Grant refunded"


class RateLimited(ProblemError):
    """Too many unpaid requests from one client (a failed payment is one; paid ones never are)."""

    status = 429
    code = "RATE_LIMITED"
    title = "Too many unpaid requests"


class CallsThrottled(RateLimited):
    """A grant made more calls than its plan's ``rate_limit`` allows in this window."""

    title = "Too many calls"


class InternalError(ProblemError):
    """Something unexpected; the client learns nothing more (the log has the request id)."""

    status = 500
    code = "INTERNAL_ERROR"
    title = "Internal error"


class CredentialPending(InternalError):
    """Paid on-chain, but the issuer failed: the record stays PAID and a retry delivers."""

    title = "Credential not issued yet"


class SettlementPending(ProblemError):
    """The chain has not decided yet: the same request after ``Retry-After`` gets the grant."""

    status = 502
    code = "SETTLEMENT_PENDING"
    title = "Settlement pending"


class StoreUnavailable(ProblemError):
    """The store cannot be reached; nothing was settled (``Retry-After``)."""

    status = 503
    code = "STORE_UNAVAILABLE"
    title = "Store unavailable"


class SettlerUnavailable(ProblemError):
    """No settler of the payment's network could be reached; nothing moved (``Retry-After``).

    The seller's outage, not the buyer's fault: the payment is untouched (the
    challenge is PENDING again and keeps its claim), so the same payment sent
    again by its buyer after ``Retry-After`` (with the purchase's requestId:
    docs/protocol/proof.md, "A payment given back") settles once a settler is
    back. A 402 would tell the buyer its payment is bad.
    """

    status = 503
    code = "SETTLER_UNAVAILABLE"
    title = "Settler unavailable"


class KeySourceUnavailable(ProblemError):
    """The keys that verify tokens cannot be had now (a JWKS fetch failed).

    The server's problem, not the client's: answering 401 would tell every
    buyer its token is bad while it is the seller's key endpoint that is down.
    """

    status = 503
    code = "KEY_SOURCE_UNAVAILABLE"
    title = "Token keys unavailable"


class RevocationsUnavailable(ProblemError):
    """A token cannot be checked: no revocation list was read yet, or it is too old.

    A verifier that honours revocations refuses every token until it has read
    the list once (the store down when x402srv started, the seller's list
    endpoint unreachable): a 401 would tell a buyer whose token is good to buy
    again. Afterwards the last list read stays in use while reads fail, unless
    ``RevocationList(max_stale_seconds=...)`` limits its age.
    """

    status = 503
    code = "REVOCATIONS_UNAVAILABLE"
    title = "Revocation list unavailable"


class UpstreamUnavailable(ProblemError):
    """Gateway mode: the seller's upstream refused the connection or broke the exchange."""

    status = 502
    code = "UPSTREAM_UNAVAILABLE"
    title = "Upstream unavailable"


class UpstreamTimeout(ProblemError):
    """Gateway mode: the seller's upstream did not answer within the route's timeouts."""

    status = 504
    code = "UPSTREAM_TIMEOUT"
    title = "Upstream timeout"


class NotReady(ProblemError):
    """``/readyz``: the store, the chain, the facilitator or the gas wallet is not usable."""

    status = 503
    code = "NOT_READY"
    title = "Not ready"
