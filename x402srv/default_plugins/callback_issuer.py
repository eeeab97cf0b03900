"""Built-in credential issuer ``callback``: the seller's own function makes the credential.

For sellers whose API already has its own keys or tokens (docs/selling.md,
"Credentials and the token guard"). ``[credentials] callback`` names the function as
``"package.module:function"`` (or ``"package.module.function"``); it is
imported when the issuer is built, so a typo stops the server at start-up.

The function gets one dict ``{requestId, challengeId, planId, resourceId,
txHash, payer}`` and returns ``{token, tokenType?, expiresAt?}``. Async
functions are awaited on the loop; sync ones run in a worker thread so a slow
one cannot stall other requests (on a timeout the thread cannot be stopped: it
finishes in the background and its answer is dropped).

Every failure (exception, timeout, malformed answer) raises
``CallbackIssuerError``: the pipeline keeps the record PAID and the buyer's
retry calls the function again (docs/protocol/flow.md, step 10). The payment is already
on-chain, so the message is for the operator's log, and it never contains the
returned token.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import math
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

from x402srv.config.fields import PluginOptions
from x402srv.errors import ConfigError, X402SrvError
from x402srv.hookspecs import Register, hookimpl
from x402srv.interfaces import Clock, CredentialIssuer, GrantRequest, IssuedCredential
from x402srv.server.plugin_context import PluginContext

__all__ = [
    "CallbackIssuer",
    "CallbackIssuerError",
    "build_callback_issuer",
    "load_callback",
    "register_credential_issuers",
]

_PATH: Final = "credentials.callback"
_ANSWER_KEYS: Final = frozenset({"token", "tokenType", "expiresAt"})
_BEARER_SCHEME: Final = "Bearer"
# Visible ASCII only: the token travels in an Authorization header.
_HEADER_SAFE: Final = re.compile(r"[\x21-\x7e]+")
_RFC3339: Final = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
)
_LATEST_TIMESTAMP: Final = 253_402_300_799  # 9999-12-31T23:59:59Z

Callback = Callable[[dict[str, str]], Any]


class CallbackIssuerError(X402SrvError):
    """The seller's callback failed or answered something unusable; nothing was delivered."""


def load_callback(spec: str | None) -> Callback:
    """Import the function ``spec`` names; every problem is a ``ConfigError`` on the key."""
    if not spec:
        raise ConfigError(
            'required for issuer = "callback" (a dotted path like "mypkg.creds:fetch")',
            path=_PATH,
        )
    if ":" in spec:
        module_name, _, attributes = spec.partition(":")
    else:
        module_name, _, attributes = spec.rpartition(".")
    parts = [*module_name.split("."), *attributes.split(".")]
    if not all(part.isidentifier() for part in parts):
        raise ConfigError(
            f'{spec!r} is not a dotted path like "package.module:function"', path=_PATH
        )
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # the seller's module may fail in any way while importing
        raise ConfigError(
            f"cannot import {module_name!r}: {type(exc).__name__}: {exc}", path=_PATH
        ) from exc
    for attribute in attributes.split("."):
        try:
            target = getattr(target, attribute)
        except AttributeError:
            raise ConfigError(f"{spec!r}: no attribute {attribute!r}", path=_PATH) from None
    if not callable(target):
        raise ConfigError(f"{spec!r} is not callable", path=_PATH)
    return target  # type: ignore[no-any-return]


def _is_async(callback: Callback) -> bool:
    # An object with ``async def __call__`` counts too (its type's __call__ is the coroutine).
    return inspect.iscoroutinefunction(callback) or inspect.iscoroutinefunction(
        type(callback).__call__
    )


def _expires_at(value: Any, *, now: float, ttl: int) -> float:
    """``expiresAt`` as seconds since the epoch; absent means now + the plan's ttl."""
    if value is None:
        return now + ttl
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("'expiresAt' must be an RFC 3339 string or unix seconds")
    if isinstance(value, str):
        if not _RFC3339.fullmatch(value):
            raise ValueError("'expiresAt' is not an RFC 3339 date-time")
        value = datetime.fromisoformat(value.upper()).timestamp()
    if not (math.isfinite(value) and now < value <= _LATEST_TIMESTAMP):
        raise ValueError("'expiresAt' must lie in the future (and before the year 10000)")
    return float(value)


def _credential(answer: object, *, now: float, ttl: int) -> IssuedCredential:
    """Check the callback's answer; messages name keys and types, never values."""
    if not isinstance(answer, Mapping):
        raise ValueError(f"returned {type(answer).__name__}, not a mapping with a 'token'")
    unknown = sorted(str(key)[:40] for key in answer if key not in _ANSWER_KEYS)
    if unknown:
        raise ValueError(f"returned unknown keys {unknown} (allowed: token, tokenType, expiresAt)")
    token = answer.get("token")
    if not isinstance(token, str) or not _HEADER_SAFE.fullmatch(token):
        raise ValueError("returned no usable 'token' (a non-empty string of visible ASCII)")
    token_type = answer.get("tokenType", _BEARER_SCHEME)
    if not isinstance(token_type, str) or not _HEADER_SAFE.fullmatch(token_type):
        raise ValueError("returned an unusable 'tokenType' (a non-empty string of visible ASCII)")
    expires_at = _expires_at(answer.get("expiresAt"), now=now, ttl=ttl)
    return IssuedCredential(token=token, token_type=token_type, expires_at=expires_at)


class CallbackIssuer:
    """Asks the seller's function for each credential, within a time limit."""

    name = "callback"
    #: The seller's function may have side effects: one call at a time per challenge.
    exclusive = True

    def __init__(
        self, callback: Callback, *, spec: str, clock: Clock, timeout_seconds: float
    ) -> None:
        self._callback = callback
        self._async = _is_async(callback)
        self._spec = spec
        self._clock = clock
        self._timeout = timeout_seconds

    def __repr__(self) -> str:
        return f"CallbackIssuer({self._spec!r}, timeout_seconds={self._timeout})"

    async def start(self) -> None:
        """Nothing to open: the function was imported when the factory ran."""

    async def close(self) -> None:
        """Nothing to close."""

    def jwks(self) -> dict[str, Any] | None:
        return None

    async def _call(self, payload: dict[str, str]) -> object:
        if self._async:
            answer = self._callback(payload)
        else:
            answer = await asyncio.to_thread(self._callback, payload)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer

    async def issue(self, request: GrantRequest) -> IssuedCredential:
        payload = {
            "requestId": request.request_id,
            "challengeId": request.challenge_id,
            "planId": request.plan_id,
            "resourceId": request.resource_id,
            "txHash": request.tx_hash,
            "payer": request.payer,
        }
        deadline = asyncio.timeout(self._timeout)
        try:
            async with deadline:
                answer = await self._call(payload)
        except Exception as exc:
            if deadline.expired():
                raise CallbackIssuerError(
                    f"callback {self._spec} did not answer within {self._timeout:g} s"
                ) from None
            raise CallbackIssuerError(f"callback {self._spec} raised {type(exc).__name__}") from exc
        try:
            return _credential(answer, now=self._clock(), ttl=request.token_ttl_seconds)
        except ValueError as exc:
            # `from None`: the answer (and its token) must not ride along in a traceback.
            raise CallbackIssuerError(f"callback {self._spec} {exc}") from None


class _NoOptions(PluginOptions):
    """``[credentials.callback]`` takes no keys: ``callback`` lives in ``[credentials]``."""


def build_callback_issuer(ctx: PluginContext) -> CallbackIssuer:
    """The factory the registry calls when ``[credentials] issuer = "callback"``."""
    ctx.parse_options(_NoOptions)
    credentials = ctx.config.credentials
    spec = credentials.callback
    callback = load_callback(spec)
    assert spec is not None  # load_callback refused an empty one
    return CallbackIssuer(
        callback, spec=spec, clock=ctx.clock, timeout_seconds=credentials.callback_timeout_seconds
    )


@hookimpl
def register_credential_issuers(register: Register[CredentialIssuer]) -> None:
    register("callback", build_callback_issuer)
