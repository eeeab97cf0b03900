"""Access tokens: the keys both sides derive from ``[credentials]``, and verification.

The ``jwt`` issuer signs what this module verifies, so the two share the key
loading (same checks, same ``ConfigError`` paths) and the key ids. Verification
is framework-free: ``x402srv.guard`` wraps it for Sanic, ``x402srv.asgi`` for
Starlette/FastAPI, and any other code calls ``verify_access_token`` (async) or
``verify_access_token_sync`` (Flask, Django views, scripts) itself. The two
share every check; only the key lookup differs (``KeySource.key_for`` awaits,
``SyncKeySource.key_for_sync`` blocks).

Verification trusts nothing in the token header. The key comes from a
``KeySource`` looked up by ``kid``, and the algorithm is the key source's own
(``HS256`` or ``EdDSA``), never the header's, so ``alg: none`` and the
HS256-with-the-public-key confusion are refused before any signature check.
``KeySource.key_for`` is async so that a JWKS-URL source (httpx, cached by
``kid``, refreshed on an unknown ``kid`` at a bounded rate: ``x402srv.tokens.jwks``)
fits behind the same call without blocking the event loop; the static sources
here never wait, so they serve both lookups.

A verifier may also be given a ``RevocationSource`` (``x402srv.tokens.revocation``:
the store's revocation list inside x402srv, the published list for anyone
else): a token of a revoked grant is then ``TokenRevoked``, checked after the
signature and on every use of a cached verification too.

Every token problem is raised as ``InvalidToken``, ``TokenExpired`` or
``TokenRevoked`` with a detail safe to show the client; pyjwt exceptions
never escape. A key source
that cannot answer (a JWKS endpoint down) raises ``KeySourceUnavailable``
instead: the server cannot check tokens right now, which is not the client's
fault and must not look like a bad token. Time comes from
an injected clock (``now``), not from pyjwt, so tests freeze it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import string
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from x402srv.errors import ConfigError, InvalidToken, TokenExpired, TokenRevoked
from x402srv.interfaces import Clock, system_clock
from x402srv.tokens.cache import VerifiedTokens
from x402srv.tokens.claims import AccessClaims

if TYPE_CHECKING:
    from jwt.types import Options

    from x402srv.config.models import Config, CredentialsConfig

__all__ = [
    "ACCESS_JWT_TYPE",
    "MAX_TOKEN_LENGTH",
    "MIN_HS256_SECRET_BYTES",
    "AccessClaims",
    "Ed25519KeySource",
    "HS256KeySource",
    "KeySource",
    "RevocationSource",
    "SyncKeySource",
    "SyncRevocationSource",
    "TokenVerifier",
    "VerifyingKey",
    "ed25519_jwk",
    "ed25519_key_id",
    "hs256_key_id",
    "hs256_secret",
    "key_source_for",
    "load_ed25519_private_key",
    "load_signing_key",
    "verify_access_token",
    "verify_access_token_sync",
]

#: The JWT ``typ`` header of an access token (RFC 9068): it keeps other JWTs
#: signed with the same key (ID tokens, ...) from being accepted as access tokens.
ACCESS_JWT_TYPE: Final = "at+jwt"
_ACCEPTED_TYPES: Final = frozenset({"at+jwt", "application/at+jwt"})

#: RFC 7518 3.2: an HS256 key must be at least as long as the hash output.
MIN_HS256_SECRET_BYTES: Final = 32

#: Longer than any token we issue by far; bounds the work an anonymous client can cause.
MAX_TOKEN_LENGTH: Final = 8192
#: RFC 7515 7.1 compact serialization: base64url segments joined by dots, nothing else.
_JWS_CHARS: Final = (string.ascii_letters + string.digits + "-_.").encode("ascii")

_SUPPORTED_ALGORITHMS: Final = frozenset({"HS256", "EdDSA"})
_REQUIRED_CLAIMS: Final = ("exp", "iat", "iss", "aud", "sub", "jti")
_STRING_CLAIMS: Final = {"resourceId": "resource_id", "planId": "plan_id", "txHash": "tx_hash"}
_HS256_KID_LABEL: Final = b"x402srv hs256 key id\x00"
_LATEST_TIMESTAMP: Final = 253_402_300_799  # 9999-12-31T23:59:59Z

#: What a key source hands to the signature check (grows with the algorithms supported).
VerifyingKey = bytes | Ed25519PublicKey


# ---------------------------------------------------------------- keys


def hs256_secret(value: str | bytes, *, path: str = "credentials.secret") -> bytes:
    """The HMAC key bytes; a short secret is a configuration error, not a warning."""
    secret = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if len(secret) < MIN_HS256_SECRET_BYTES:
        raise ConfigError(
            f"an HS256 secret must be at least {MIN_HS256_SECRET_BYTES} bytes (got {len(secret)})",
            path=path,
        )
    return secret


def hs256_key_id(secret: bytes) -> str:
    """A short id that names the secret without revealing it (labelled SHA-256 prefix).

    The label separates it from a plain ``sha256(secret)`` that some other
    system might publish for the same secret; 64 bits of a hash of a secret of
    at least 256 bits give nothing away.
    """
    return hashlib.sha256(_HS256_KID_LABEL + secret).hexdigest()[:16]


def load_ed25519_private_key(
    pem: str | bytes, *, path: str = "credentials.private_key"
) -> Ed25519PrivateKey:
    """An unencrypted PEM private key that must be Ed25519 (anything else is a config error)."""
    data = pem.encode("utf-8") if isinstance(pem, str) else pem
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        # The library's message could quote the input; the key is a secret.
        raise ConfigError("not an unencrypted PEM private key", path=path) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"EdDSA needs an Ed25519 key, not {_key_kind(key)}", path=path)
    return key


def _load_ed25519_public_key(pem: str | bytes, *, path: str) -> Ed25519PublicKey:
    data = pem.encode("utf-8") if isinstance(pem, str) else pem
    if b"PRIVATE KEY" in data:
        return load_ed25519_private_key(data, path=path).public_key()
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigError("not a PEM public or private key", path=path) from None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"EdDSA needs an Ed25519 key, not {_key_kind(key)}", path=path)
    return key


def _key_kind(key: object) -> str:
    return type(key).__name__.lstrip("_").removesuffix("PrivateKey").removesuffix("PublicKey")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def ed25519_key_id(key: Ed25519PublicKey) -> str:
    """The RFC 7638 JWK thumbprint: a kid anyone holding the public key can recompute."""
    members = {"crv": "Ed25519", "kty": "OKP", "x": _b64url(_raw_public(key))}
    canonical = json.dumps(members, separators=(",", ":"), sort_keys=True).encode("ascii")
    return _b64url(hashlib.sha256(canonical).digest())


def ed25519_jwk(key: Ed25519PublicKey, kid: str | None = None) -> dict[str, str]:
    """The public JWK served at ``/.well-known/jwks.json`` (RFC 8037)."""
    return {
        "kty": "OKP",
        "crv": "Ed25519",
        "x": _b64url(_raw_public(key)),
        "kid": kid or ed25519_key_id(key),
        "alg": "EdDSA",
        "use": "sig",
    }


# ---------------------------------------------------------------- key sources


@runtime_checkable
class KeySource(Protocol):
    """Where verification keys come from, one pinned algorithm per source."""

    @property
    def algorithm(self) -> str:
        """The only JWS algorithm accepted for this source's keys (``HS256`` or ``EdDSA``)."""
        ...

    async def key_for(self, kid: str | None) -> VerifyingKey | None:
        """The key named ``kid`` (from the unverified header), or None when there is none.

        Raise only for the source's own failures (a JWKS fetch that broke):
        those are the server's problem, not the client's.
        """
        ...


@runtime_checkable
class SyncKeySource(Protocol):
    """A key source that sync code can ask without an event loop (``verify_access_token_sync``)."""

    @property
    def algorithm(self) -> str:
        """As ``KeySource.algorithm``."""
        ...

    def key_for_sync(self, kid: str | None) -> VerifyingKey | None:
        """As ``KeySource.key_for``, blocking (a JWKS source fetches with ``httpx.Client``)."""
        ...


@runtime_checkable
class RevocationSource(Protocol):
    """Which grants the seller revoked (``x402srv.tokens.revocation`` has the two kinds)."""

    async def is_revoked(self, challenge_id: str) -> bool:
        """Whether the grant of ``challenge_id`` (a token's ``jti``) was revoked.

        Raise only for the source's own failures (``RevocationsUnavailable``).
        """
        ...


@runtime_checkable
class SyncRevocationSource(Protocol):
    """A revocation source sync code can ask (``verify_access_token_sync``)."""

    def is_revoked_sync(self, challenge_id: str) -> bool:
        """As ``RevocationSource.is_revoked``, blocking."""
        ...


_REVOKED = "The access token's grant was revoked by the seller."


class HS256KeySource:
    """A shared secret: the issuer and the seller's API hold the same bytes."""

    algorithm: Final = "HS256"

    def __init__(self, secret: str | bytes, *, kid: str | None = None) -> None:
        self._secret = hs256_secret(secret)
        self.kid = kid or hs256_key_id(self._secret)

    def __repr__(self) -> str:
        return f"HS256KeySource(kid={self.kid!r})"

    async def key_for(self, kid: str | None) -> VerifyingKey | None:
        return self.key_for_sync(kid)

    def key_for_sync(self, kid: str | None) -> VerifyingKey | None:
        return self._secret if kid == self.kid else None


class Ed25519KeySource:
    """One Ed25519 public key: a cryptography key object, a PEM, or the issuer's private key."""

    algorithm: Final = "EdDSA"

    def __init__(
        self,
        key: Ed25519PublicKey | Ed25519PrivateKey | str | bytes,
        *,
        kid: str | None = None,
        path: str = "credentials.private_key",
    ) -> None:
        if isinstance(key, Ed25519PrivateKey):
            key = key.public_key()
        elif isinstance(key, str | bytes):
            key = _load_ed25519_public_key(key, path=path)
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigError(f"EdDSA needs an Ed25519 key, not {_key_kind(key)}", path=path)
        self.public_key = key
        self.kid = kid or ed25519_key_id(key)

    def __repr__(self) -> str:
        return f"Ed25519KeySource(kid={self.kid!r})"

    def jwks(self) -> dict[str, Any]:
        return {"keys": [ed25519_jwk(self.public_key, self.kid)]}

    async def key_for(self, kid: str | None) -> VerifyingKey | None:
        return self.key_for_sync(kid)

    def key_for_sync(self, kid: str | None) -> VerifyingKey | None:
        return self.public_key if kid == self.kid else None


class KeyRing:
    """The current key and the retired ones, one algorithm, looked up by ``kid``.

    Rotation: sign with a new key, keep the old one here until every token it
    signed has expired (its plans' ``token_ttl_seconds``), then drop it.
    """

    def __init__(self, sources: Sequence[HS256KeySource | Ed25519KeySource]) -> None:
        algorithms = {source.algorithm for source in sources}
        if len(algorithms) != 1:
            raise ConfigError("previous keys must use the same algorithm as the current key")
        kids = [source.kid for source in sources]
        if len(set(kids)) != len(kids):
            raise ConfigError("two keys share a kid", path="credentials.previous_keys")
        self.algorithm: str = algorithms.pop()
        self.sources = list(sources)
        self.kid = sources[0].kid

    def __repr__(self) -> str:
        return f"KeyRing({', '.join(repr(s) for s in self.sources)})"

    def jwks(self) -> dict[str, Any]:
        keys = [
            ed25519_jwk(s.public_key, s.kid)
            for s in self.sources
            if isinstance(s, Ed25519KeySource)
        ]
        return {"keys": keys}

    async def key_for(self, kid: str | None) -> VerifyingKey | None:
        return self.key_for_sync(kid)

    def key_for_sync(self, kid: str | None) -> VerifyingKey | None:
        for source in self.sources:
            key = source.key_for_sync(kid)
            if key is not None:
                return key
        return None


def key_ring_for(credentials: CredentialsConfig) -> KeyRing:
    """The configured signing key first, then ``previous_keys``, as one verifying source."""
    sources = [key_source_for(load_signing_key(credentials), kid=credentials.kid)]
    for index, previous in enumerate(credentials.previous_keys):
        path = f"credentials.previous_keys[{index}]"
        if credentials.algorithm == "EdDSA":
            sources.append(Ed25519KeySource(previous.key.reveal(), kid=previous.kid, path=path))
        else:
            try:
                sources.append(HS256KeySource(previous.key.reveal(), kid=previous.kid))
            except ConfigError as exc:
                raise ConfigError(str(exc).split(": ", 1)[-1], path=path) from None
    return KeyRing(sources)


def load_signing_key(credentials: CredentialsConfig) -> bytes | Ed25519PrivateKey:
    """The ``jwt`` issuer's key from ``[credentials]``: the HS256 secret or the Ed25519 key."""
    if credentials.algorithm == "EdDSA":
        if credentials.private_key is None:
            raise ConfigError(
                'required for algorithm = "EdDSA" (an Ed25519 PEM private key)',
                path="credentials.private_key",
            )
        return load_ed25519_private_key(credentials.private_key.reveal())
    if credentials.secret is None:
        raise ConfigError(
            f'required for algorithm = "HS256" (at least {MIN_HS256_SECRET_BYTES} bytes)',
            path="credentials.secret",
        )
    return hs256_secret(credentials.secret.reveal())


def key_source_for(
    key: bytes | Ed25519PrivateKey, *, kid: str | None = None
) -> HS256KeySource | Ed25519KeySource:
    """The source that verifies what ``key`` signs, with the same kid the issuer puts in tokens."""
    if isinstance(key, Ed25519PrivateKey):
        return Ed25519KeySource(key, kid=kid)
    return HS256KeySource(key, kid=kid)


# ---------------------------------------------------------------- claims


def _options() -> Options:
    # Time claims are checked below against the injected clock, not pyjwt's.
    return {
        "require": list(_REQUIRED_CLAIMS),
        "verify_signature": True,
        "verify_exp": False,
        "verify_iat": False,
        "verify_nbf": False,
        "verify_iss": True,
        "verify_aud": True,
        "verify_sub": True,
        "verify_jti": True,
        "enforce_minimum_key_length": True,
    }


def _unverified_header(token: str) -> dict[str, Any]:
    if not token or len(token) > MAX_TOKEN_LENGTH or token.count(".") != 2:
        raise InvalidToken("The access token is malformed.")
    # Only the compact form, whichever pyjwt is installed (older releases decode base64url
    # leniently, skipping characters outside the alphabet). Trailing padding passes, as in
    # an RFC 6750 b64token. bytes.translate deletes every allowed byte in one C pass:
    # anything left is a stray character. Only a token that passed this is ever cached
    # (``TokenVerifier._accept``), which is why ``admission`` need not check the form itself.
    body = token.rstrip("=")
    if not body.isascii() or body.encode("ascii").translate(None, _JWS_CHARS):
        raise InvalidToken("The access token is malformed.")
    try:
        return jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise InvalidToken("The access token is malformed.") from None


def _decode(
    token: str, key: VerifyingKey, algorithm: str, *, issuer: str, audience: str
) -> dict[str, Any]:
    try:
        return jwt.decode(
            token,
            key,
            algorithms=[algorithm],
            audience=audience,
            issuer=issuer,
            options=_options(),
        )
    except jwt.MissingRequiredClaimError as exc:
        detail = f"The access token has no {exc.claim!r} claim."
    except jwt.InvalidAlgorithmError:
        detail = "The access token is not signed with the accepted algorithm."
    except jwt.InvalidSignatureError:
        detail = "The access token signature is invalid."
    except jwt.InvalidAudienceError:
        detail = "The access token is not meant for this audience."
    except jwt.InvalidIssuerError:
        detail = "The access token comes from another issuer."
    except jwt.PyJWTError:
        detail = "The access token is malformed."
    raise InvalidToken(detail)


def _timestamp(claims: Mapping[str, Any], name: str) -> float:
    value = claims[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidToken(f"The access token's {name!r} claim is not a number.")
    if not math.isfinite(value) or not 0 <= value <= _LATEST_TIMESTAMP:
        raise InvalidToken(f"The access token's {name!r} claim is out of range.")
    return float(value)


def _check_times(claims: Mapping[str, Any], now: float, leeway: float) -> tuple[float, float]:
    issued_at = _timestamp(claims, "iat")
    expires_at = _timestamp(claims, "exp")
    if issued_at > now + leeway:
        raise InvalidToken("The access token was issued in the future.")
    if "nbf" in claims and _timestamp(claims, "nbf") > now + leeway:
        raise InvalidToken("The access token is not valid yet.")
    if expires_at <= now - leeway:
        raise TokenExpired("The access token has expired.")
    return issued_at, expires_at


def _access_claims(
    claims: dict[str, Any], issued_at: float, expires_at: float, audience: str
) -> AccessClaims:
    values: dict[str, str] = {}
    for claim, field_name in _STRING_CLAIMS.items():
        value = claims.get(claim)
        if not isinstance(value, str) or not value:
            raise InvalidToken(f"The access token has no {claim!r} claim.")
        values[field_name] = value
    for claim in ("sub", "jti"):
        if not claims[claim]:
            raise InvalidToken(f"The access token's {claim!r} claim is empty.")
    payer = claims.get("payer")
    if payer is not None and not isinstance(payer, str):
        raise InvalidToken("The access token's 'payer' claim is not a string.")
    return AccessClaims(
        request_id=claims["sub"],
        challenge_id=claims["jti"],
        payer=payer,
        issued_at=issued_at,
        expires_at=expires_at,
        issuer=claims["iss"],
        audience=audience,
        claims=MappingProxyType(claims),
        **values,
    )


def _pinned_algorithm(
    key_source: KeySource | SyncKeySource, algorithms: Sequence[str] | None
) -> str:
    algorithm = key_source.algorithm
    if algorithm not in _SUPPORTED_ALGORITHMS:
        raise ConfigError(f"unsupported token algorithm {algorithm!r} (HS256 or EdDSA)")
    if algorithms is not None and algorithm not in algorithms:
        raise ConfigError(
            f"the key source signs with {algorithm}, which `algorithms` does not allow"
        )
    return algorithm


def _header_kid(token: str) -> str | None:
    """Checks on the unverified header, before any key is looked up; returns its ``kid``."""
    header = _unverified_header(token)
    typ = header.get("typ")
    if not isinstance(typ, str) or typ.lower() not in _ACCEPTED_TYPES:
        raise InvalidToken(f"The token is not an access token (typ must be {ACCESS_JWT_TYPE}).")
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise InvalidToken("The access token is malformed.")
    return kid


def _verify_with_key(
    token: str,
    key: VerifyingKey | None,
    algorithm: str,
    *,
    issuer: str,
    audience: str,
    leeway: float,
    now: float | None,
) -> AccessClaims:
    """Everything after the key lookup; shared by the async and the sync entry points."""
    if key is None:
        raise InvalidToken("The access token is signed with an unknown key.")
    claims = _decode(token, key, algorithm, issuer=issuer, audience=audience)
    current = system_clock() if now is None else now
    issued_at, expires_at = _check_times(claims, current, leeway)
    return _access_claims(claims, issued_at, expires_at, audience)


async def verify_access_token(
    token: str,
    key_source: KeySource,
    *,
    issuer: str,
    audience: str,
    algorithms: Sequence[str] | None = None,
    leeway: float = 0,
    now: float | None = None,
    revocations: RevocationSource | None = None,
) -> AccessClaims:
    """Verify an ``at+jwt`` access token and return its claims.

    Raises ``TokenExpired`` for an expired token, ``TokenRevoked`` for one whose
    grant ``revocations`` (when given) lists, and ``InvalidToken`` for every
    other token problem. ``algorithms`` may only narrow what the key source
    uses; one that excludes it is a programming error (``ConfigError``, raised
    whatever the token). Failures of the key source itself propagate
    (``KeySourceUnavailable`` from a JWKS source that cannot be fetched), and
    so do those of the revocation source (``RevocationsUnavailable``).
    """
    algorithm = _pinned_algorithm(key_source, algorithms)
    kid = _header_kid(token)
    key = await key_source.key_for(kid)
    claims = _verify_with_key(
        token, key, algorithm, issuer=issuer, audience=audience, leeway=leeway, now=now
    )
    if revocations is not None and await revocations.is_revoked(claims.challenge_id):
        raise TokenRevoked(_REVOKED)
    return claims


def verify_access_token_sync(
    token: str,
    key_source: SyncKeySource,
    *,
    issuer: str,
    audience: str,
    algorithms: Sequence[str] | None = None,
    leeway: float = 0,
    now: float | None = None,
    revocations: SyncRevocationSource | None = None,
) -> AccessClaims:
    """``verify_access_token`` for code without an event loop (Flask, Django, scripts).

    Same checks, same errors; a JWKS source (and a revocation list) fetches with
    a blocking client here, so never call this on an event loop.
    """
    algorithm = _pinned_algorithm(key_source, algorithms)
    kid = _header_kid(token)
    key = key_source.key_for_sync(kid)
    claims = _verify_with_key(
        token, key, algorithm, issuer=issuer, audience=audience, leeway=leeway, now=now
    )
    if revocations is not None and revocations.is_revoked_sync(claims.challenge_id):
        raise TokenRevoked(_REVOKED)
    return claims


class TokenVerifier:
    """Everything a guard needs to check tokens, fixed (and validated) at construction.

    Building one is where a missing or unusable key surfaces (``ConfigError``),
    so an app with a broken guard fails at start-up instead of answering 500s.
    """

    def __init__(
        self,
        key_source: KeySource,
        *,
        issuer: str,
        audience: str,
        clock: Clock = system_clock,
        leeway: float = 0,
        algorithms: Sequence[str] | None = None,
        revocations: RevocationSource | SyncRevocationSource | None = None,
    ) -> None:
        if not issuer:
            raise ConfigError("the token issuer must not be empty")
        if not audience:
            raise ConfigError("the token audience must not be empty")
        if not 0 <= leeway <= 300:
            raise ConfigError("the clock leeway must be between 0 and 300 seconds")
        self.algorithm = _pinned_algorithm(key_source, algorithms)
        self.key_source = key_source
        self.issuer = issuer
        self.audience = audience
        self.clock = clock
        self.leeway = leeway
        self.revocations = revocations
        self._verified = VerifiedTokens()
        # ``revocations`` once its kind was checked: ``isinstance`` on a runtime-checkable
        # Protocol costs several microseconds, too much for every call.
        self._async_source: RevocationSource | None = None
        self._sync_source: SyncRevocationSource | None = None
        self._sync_keys: SyncKeySource | None = None

    def __repr__(self) -> str:
        return (
            f"TokenVerifier({self.key_source!r}, issuer={self.issuer!r}, "
            f"audience={self.audience!r})"
        )

    async def verify(self, token: str) -> AccessClaims:
        """See ``verify_access_token``; the time is the verifier's clock.

        A token this verifier accepted in the last minute is not decoded again:
        only its expiry is checked (``x402srv.tokens.cache``), and its revocation.
        """
        now = self.clock()
        claims = self._verified.get(token, now, self.leeway)
        if claims is None:
            key = await self.key_source.key_for(_header_kid(token))
            claims = self._accept(token, key, now)
        revocations = self.revocations
        if revocations is not None:
            source = self._async_source
            if source is None or source is not revocations:
                if not isinstance(revocations, RevocationSource):
                    raise ConfigError(f"{revocations!r} has no async lookup (is_revoked)")
                source = self._async_source = revocations
            if await source.is_revoked(claims.challenge_id):
                raise TokenRevoked(_REVOKED)
        return claims

    def verify_sync(self, token: str) -> AccessClaims:
        """See ``verify_access_token_sync``; the key source must also be a ``SyncKeySource``."""
        keys: object = self.key_source
        source = self._sync_keys
        if source is None or source is not keys:
            if not isinstance(keys, SyncKeySource):
                raise ConfigError(f"{keys!r} has no blocking lookup (key_for_sync)")
            source = self._sync_keys = keys
        now = self.clock()
        claims = self._verified.get(token, now, self.leeway)
        if claims is None:
            claims = self._accept(token, source.key_for_sync(_header_kid(token)), now)
        revocations = self.revocations
        if revocations is not None:
            sync_source = self._sync_source
            if sync_source is None or sync_source is not revocations:
                if not isinstance(revocations, SyncRevocationSource):
                    raise ConfigError(f"{revocations!r} has no blocking lookup (is_revoked_sync)")
                sync_source = self._sync_source = revocations
            if sync_source.is_revoked_sync(claims.challenge_id):
                raise TokenRevoked(_REVOKED)
        return claims

    def _accept(self, token: str, key: VerifyingKey | None, now: float) -> AccessClaims:
        """The checks after the key lookup (the algorithm was pinned when this was built)."""
        claims = _verify_with_key(
            token,
            key,
            self.algorithm,
            issuer=self.issuer,
            audience=self.audience,
            leeway=self.leeway,
            now=now,
        )
        self._verified.put(token, claims, now)
        return claims

    @classmethod
    def from_config(
        cls,
        config: Config,
        *,
        clock: Clock = system_clock,
        leeway: float = 0,
        revocations: RevocationSource | SyncRevocationSource | None = None,
    ) -> TokenVerifier:
        """The verifier for what the ``jwt`` issuer of this config signs.

        ``revocations``: where revoked grants are read, e.g.
        ``RevocationList.for_config(config)`` (x402srv's published list).
        """
        credentials = config.credentials
        if credentials.issuer != "jwt":
            raise ConfigError(
                f"the token guard checks tokens of the jwt issuer, not {credentials.issuer!r}",
                path="credentials.issuer",
            )
        source = key_ring_for(credentials)
        agent_url = config.seller.agent_url
        return cls(
            source,
            issuer=agent_url,
            audience=credentials.audience or agent_url,
            clock=clock,
            leeway=leeway,
            revocations=revocations,
        )
