"""A ``KeySource`` that reads Ed25519 keys from a JWKS URL (x402srv's ``/.well-known/jwks.json``).

A seller's API that does not share a secret with x402srv verifies EdDSA tokens
with the public keys x402srv publishes. This source fetches that key set, keeps
it by ``kid`` and serves both lookups from ONE cache: ``key_for`` (async,
``httpx.AsyncClient``, for event loops) and ``key_for_sync`` (``httpx.Client``,
for Flask, Django and scripts).

When it fetches, and why:

- the cache is empty or older than ``cache_ttl`` (keys that were removed from the
  set, i.e. revoked, stop verifying within that time);
- a token names a ``kid`` the cache does not hold (x402srv restarted with a new
  key): refetch at once, but at most once per ``min_refresh_interval``, so a
  flood of made-up ``kid`` values costs the JWKS endpoint one request per
  interval, not one per request.

What a failed fetch means (the choice documented in docs/other-apps.md):

- keys already held keep verifying (stale-if-error) and the failure is logged:
  a JWKS endpoint that blinks must not log every buyer out;
- a token whose key could only come from the failed fetch raises
  ``KeySourceUnavailable`` (503 in every guard), never ``InvalidToken``: the
  server cannot tell whether the token is good, and saying 401 would send
  buyers to pay again for a fault on the seller's side;
- an unknown ``kid`` after a *successful* refresh is ``None`` (the caller's
  ``InvalidToken``): the issuer does not know that key.

Only Ed25519 keys (``kty: OKP``, ``crv: Ed25519``) with a ``kid`` are taken;
others in the set are skipped. The algorithm is pinned to ``EdDSA`` whatever a
token or the set says. Fetches use no environment proxies, follow no
redirects, and read at most ``MAX_JWKS_BYTES``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from x402srv.errors import ConfigError, KeySourceUnavailable
from x402srv.tokens.verify import VerifyingKey
from x402srv.wire.protocol import JsonTooDeep, bounded_json

__all__ = ["MAX_JWKS_BYTES", "JWKSKeySource", "parse_jwks"]

#: x402srv serves one key; rotation adds a few. Far above that, far below harm.
MAX_JWKS_BYTES: Final = 64 * 1024
_MAX_KEYS: Final = 100
_RETRY_AFTER: Final = 5
_LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost."})

log = logging.getLogger("x402srv.tokens.jwks")


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _checked_url(url: str, allow_http: bool, what: str = "the JWKS URL") -> str:
    """An https URL (http only to a loopback address, or with ``allow_http``)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise ConfigError(f"{what} is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what} must be an http(s) URL with a host")
    if parts.scheme == "http" and not (allow_http or _is_loopback(parts.hostname)):
        # Keys (or revocations) fetched in clear text can be forged by anyone on the path.
        raise ConfigError(f"{what} must be https (http only for loopback or allow_http)")
    return url


checked_url = _checked_url


def _ed25519_key(jwk: Mapping[str, Any]) -> Ed25519PublicKey | None:
    if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        return None
    if jwk.get("alg", "EdDSA") != "EdDSA" or jwk.get("use", "sig") != "sig":
        return None
    x = jwk.get("x")
    if not isinstance(x, str):
        return None
    try:
        raw = base64.urlsafe_b64decode(x + "=" * (-len(x) % 4))
        return Ed25519PublicKey.from_public_bytes(raw)
    except (ValueError, binascii.Error):
        return None


def parse_jwks(document: bytes) -> dict[str, Ed25519PublicKey]:
    """The usable keys of a JWKS document by ``kid``; ``ValueError`` if it is not a key set."""
    if len(document) > MAX_JWKS_BYTES:
        raise ValueError(f"the key set is larger than {MAX_JWKS_BYTES} bytes")
    try:
        data = bounded_json(document)  # a key endpoint must not be able to crash the verifier
    except JsonTooDeep:
        raise ValueError(
            "the key set has more JSON arrays/objects than any key set needs"
        ) from None
    except ValueError:
        raise ValueError("the key set is not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise ValueError('the key set is not an object with a "keys" array')
    keys: dict[str, Ed25519PublicKey] = {}
    for jwk in data["keys"][:_MAX_KEYS]:
        if not isinstance(jwk, dict) or not isinstance(jwk.get("kid"), str) or not jwk["kid"]:
            continue
        key = _ed25519_key(jwk)
        if key is not None:
            keys.setdefault(jwk["kid"], key)
    if not keys:
        raise ValueError("the key set holds no Ed25519 key with a kid")
    return keys


@dataclass
class _Cache:
    """What both lookups share. Times come from the source's monotonic clock."""

    keys: dict[str, Ed25519PublicKey] = field(default_factory=dict)
    fetched_at: float | None = None  # last successful fetch
    attempted_at: float | None = None  # last fetch attempt, successful or not
    failed: bool = False  # the last attempt failed


class JWKSKeySource:
    """Ed25519 keys from a JWKS URL, cached by ``kid``; see the module docstring.

    ``client``/``sync_client`` are used as given (the caller closes them);
    without them each fetch opens and closes its own, which costs one
    connection per fetch and keeps this object free of a lifecycle.
    """

    algorithm: Final = "EdDSA"

    def __init__(
        self,
        url: str,
        *,
        cache_ttl: float = 300.0,
        min_refresh_interval: float = 30.0,
        timeout: float = 5.0,
        client: httpx.AsyncClient | None = None,
        sync_client: httpx.Client | None = None,
        allow_http: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if cache_ttl <= 0 or min_refresh_interval < 0 or timeout <= 0:
            raise ConfigError("cache_ttl and timeout must be > 0, min_refresh_interval >= 0")
        self.url = _checked_url(url, allow_http)
        self.cache_ttl = cache_ttl
        self.min_refresh_interval = min_refresh_interval
        self.timeout = timeout
        self._client = client
        self._sync_client = sync_client
        self._clock = clock
        self._cache = _Cache()
        self._thread_lock = threading.Lock()
        # One lock per event loop: an asyncio.Lock belongs to the loop that first waits on it.
        self._loop_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        parts = urlsplit(self.url)
        return f"JWKSKeySource({parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path})"

    @property
    def kids(self) -> list[str]:
        """The key ids held now (for diagnostics and tests)."""
        return sorted(self._cache.keys)

    # ------------------------------------------------------------ the decision

    def _lookup(self, kid: str | None) -> tuple[VerifyingKey | None, bool]:
        """``(key, fetch_first)`` from the cache alone."""
        cache, now = self._cache, self._clock()
        if kid is None:
            return None, False  # x402srv always names its key; a kid-less token names none
        fresh = cache.fetched_at is not None and now - cache.fetched_at < self.cache_ttl
        key = cache.keys.get(kid)
        recently = (
            cache.attempted_at is not None and now - cache.attempted_at < self.min_refresh_interval
        )
        if key is not None and (fresh or recently):
            return key, False  # (a stale key still verifies until the next fetch is allowed)
        if recently:
            # Rate bound: no fetch yet. A kid that only the failed fetch could have
            # brought is the server's problem; after a good fetch it is the token's.
            if cache.failed:
                raise self._unavailable()
            return None, False
        return key, True

    def _unavailable(self) -> KeySourceUnavailable:
        return KeySourceUnavailable(
            "The keys that verify access tokens cannot be fetched right now; retry later.",
            retry_after=_RETRY_AFTER,
        )

    def _store(self, document: bytes | None, error: str | None) -> None:
        cache = self._cache
        cache.attempted_at = self._clock()
        if document is not None:
            try:
                cache.keys = parse_jwks(document)
            except ValueError as exc:
                error = str(exc)
            else:
                cache.fetched_at, cache.failed = cache.attempted_at, False
                return
        cache.failed = True
        log.warning(
            "JWKS fetch from %r failed: %s; keeping %d known keys", self, error, len(cache.keys)
        )

    def _after_fetch(self, kid: str | None) -> VerifyingKey | None:
        key = self._cache.keys.get(kid) if kid is not None else None
        if key is None and self._cache.failed:
            raise self._unavailable()
        return key

    @staticmethod
    def _body(response: httpx.Response, content: bytes) -> tuple[bytes | None, str | None]:
        if response.status_code != 200:
            return None, f"HTTP {response.status_code}"
        return content, None

    # ------------------------------------------------------------ async

    def _loop_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._loop_locks.get(loop)
        if lock is None:
            lock = self._loop_locks[loop] = asyncio.Lock()
        return lock

    async def key_for(self, kid: str | None) -> VerifyingKey | None:
        key, fetch = self._lookup(kid)
        if not fetch:
            return key
        async with self._loop_lock():  # concurrent misses share one fetch
            key, fetch = self._lookup(kid)
            if not fetch:
                return key
            self._store(*await self._fetch_async())
            return self._after_fetch(kid)

    async def _fetch_async(self) -> tuple[bytes | None, str | None]:
        try:
            if self._client is not None:
                return await self._get_async(self._client)
            async with httpx.AsyncClient(trust_env=False, timeout=self.timeout) as client:
                return await self._get_async(client)
        except httpx.HTTPError as exc:
            return None, type(exc).__name__

    async def _get_async(self, client: httpx.AsyncClient) -> tuple[bytes | None, str | None]:
        async with client.stream("GET", self.url, timeout=self.timeout) as response:
            content = b""
            async for chunk in response.aiter_bytes():
                content += chunk
                if len(content) > MAX_JWKS_BYTES:
                    return None, f"larger than {MAX_JWKS_BYTES} bytes"
            return self._body(response, content)

    # ------------------------------------------------------------ sync

    def key_for_sync(self, kid: str | None) -> VerifyingKey | None:
        key, fetch = self._lookup(kid)
        if not fetch:
            return key
        with self._thread_lock:  # concurrent misses share one fetch
            key, fetch = self._lookup(kid)
            if not fetch:
                return key
            self._store(*self._fetch_sync())
            return self._after_fetch(kid)

    def _fetch_sync(self) -> tuple[bytes | None, str | None]:
        try:
            if self._sync_client is not None:
                return self._get_sync(self._sync_client)
            with httpx.Client(trust_env=False, timeout=self.timeout) as client:
                return self._get_sync(client)
        except httpx.HTTPError as exc:
            return None, type(exc).__name__

    def _get_sync(self, client: httpx.Client) -> tuple[bytes | None, str | None]:
        with client.stream("GET", self.url, timeout=self.timeout) as response:
            content = b""
            for chunk in response.iter_bytes():
                content += chunk
                if len(content) > MAX_JWKS_BYTES:
                    return None, f"larger than {MAX_JWKS_BYTES} bytes"
            return self._body(response, content)
