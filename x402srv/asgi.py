"""Token guard for Starlette and FastAPI sellers: pure ASGI middleware (``x402srv[asgi]``).

```python
config = load_config("seller.toml")
app = FastAPI()
app.add_middleware(
    AccessMiddleware,
    verifier=TokenVerifier.from_config(config),   # or a JWKSKeySource, see x402srv.tokens.jwks
    paths=["/api"],
    agent_card=agent_card(config),                # optional: discovery without Sanic
)

@app.get("/api/weather")
async def weather(claims: AccessClaims = Depends(access_claims)): ...
```

Same decisions as the Sanic guard (``x402srv.tokens.admission``): the same 401
problem bodies and ``WWW-Authenticate``, 503 when the keys cannot be fetched,
a bare 500 for anything unexpected. The verified ``AccessClaims`` go to
``request.state.x402`` (``scope["state"]``, which Starlette's ``request.state``
reads). A guarded websocket without a valid token is closed with 1008 before
it is accepted.

Pure ASGI rather than ``BaseHTTPMiddleware``: nothing is buffered (streaming
bodies and responses pass untouched) and the guarded app's context variables
are its own. Paths are matched fail-closed (``x402srv.server.paths.is_guarded``) on
``path``, ``raw_path`` and their decoded and normalised forms: uvicorn decodes
``%2F`` in ``path`` before Starlette routes on it, so a raw-only check could
be walked around with ``/api%2Fdata``.

With a ``meter`` (``x402srv.usage.credits.Meter``) every guarded call of a plan
that sells calls or limits them is metered before the app sees it: ``cost``
credits (a number, or a function of the scope), 402 ``CREDITS_EXHAUSTED`` or
429 with ``Retry-After`` when refused, else the app's answer gains the
``RateLimit-Policy`` and ``RateLimit`` fields, and an answer of 5xx (or an app
that raised) gives the credits back (``Meter.refund_on_5xx``). The ``Usage``
is at ``request.state.x402_usage``. A metered websocket spends once, when it
connects.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from x402srv.errors import ProblemError
from x402srv.server.paths import guarded_prefixes, is_guarded
from x402srv.server.problems import PROBLEM_CONTENT_TYPE
from x402srv.tokens import admission
from x402srv.tokens.verify import AccessClaims, TokenVerifier
from x402srv.usage.credits import Meter, Usage

__all__ = [
    "CARD_PATHS",
    "STATE_KEY",
    "USAGE_KEY",
    "AccessMiddleware",
    "ScopeCost",
    "ScopePredicate",
    "access_claims",
]

#: The key of ``scope["state"]`` (``request.state.x402``) that holds the claims.
STATE_KEY: Final = "x402"
#: The key of ``scope["state"]`` (``request.state.x402_usage``) of a metered call's ``Usage``.
USAGE_KEY: Final = "x402_usage"
#: Where the agent card is served (docs/protocol/wire.md: both spellings).
CARD_PATHS: Final = frozenset({"/.well-known/agent.json", "/.well-known/agent-card.json"})
#: RFC 6455 "policy violation": the websocket counterpart of a 401.
_WS_POLICY_VIOLATION: Final = 1008

ScopePredicate = Callable[[Scope], bool]
ScopeCost = Callable[[Scope], int]


def _json(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _fixed(cost: int) -> ScopeCost:
    return lambda scope: cost


def _header_values(scope: Scope, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in scope["headers"] if key.lower() == name]


class AccessMiddleware:
    """Guard ``paths`` (prefixes, or a predicate on the scope) of an ASGI app."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        verifier: TokenVerifier,
        paths: str | Sequence[str] | ScopePredicate,
        agent_card: Mapping[str, Any] | None = None,
        meter: Meter | None = None,
        cost: int | ScopeCost = 1,
    ) -> None:
        self.app = app
        self.verifier = verifier
        self.meter = meter
        self._cost: ScopeCost = cost if callable(cost) else _fixed(cost)
        if isinstance(paths, str):
            paths = [paths]
        if callable(paths):
            self._guarded: ScopePredicate = paths
        else:
            prefixes = guarded_prefixes(paths)
            self._guarded = lambda scope: self._under(scope, prefixes)
        self._card = None if agent_card is None else _json(agent_card)

    def _serves_card(self, scope: Scope) -> bool:
        return (
            self._card is not None
            and scope["type"] == "http"
            and scope["path"] in CARD_PATHS
            and scope["method"] in ("GET", "HEAD")
        )

    @staticmethod
    def _under(scope: Scope, prefixes: Sequence[str]) -> bool:
        raw = scope.get("raw_path")
        path: str = scope["path"]
        if raw and is_guarded(raw.decode("latin-1"), prefixes):
            return True
        return is_guarded(path, prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if self._serves_card(scope):
            assert self._card is not None
            await self._send(send, 200, self._card, "application/json", {}, scope)
            return
        if self._guarded(scope):
            result = await admission.admit(self.verifier, _header_values(scope, b"authorization"))
            if not isinstance(result, AccessClaims):
                await self._refuse(result, scope, receive, send)
                return
            scope.setdefault("state", {})[STATE_KEY] = result
            if self.meter is not None:
                try:
                    usage = await self.meter.spend(result, self._cost(scope))
                except ProblemError as err:  # 402, 429, 503: never reaches the app
                    await self._refuse(err, scope, receive, send)
                    return
                if usage is not None:
                    scope["state"][USAGE_KEY] = usage
                    await self._metered(self.meter, usage, scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _metered(
        self, meter: Meter, usage: Usage, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Run the app with the RateLimit fields on its answer; a 5xx gets the credits back.

        The refund happens before the answer starts (or before the server answers
        500 for an app that raised), so the buyer's next call already sees it.
        """
        started = False

        async def sending(message: Message) -> None:
            nonlocal usage, started
            if message["type"] == "http.response.start":
                started = True
                if meter.refunds(int(message["status"])):
                    usage = await meter.refund(usage)
                fields = [(k.lower().encode(), v.encode()) for k, v in usage.headers().items()]
                message = {**message, "headers": [*message.get("headers", ()), *fields]}
            await send(message)

        try:
            await self.app(scope, receive, sending if scope["type"] == "http" else send)
        except BaseException:
            if not started and meter.refund_on_5xx:
                await meter.refund(usage)
            raise
        if scope["type"] == "http" and not started and meter.refund_on_5xx:
            await meter.refund(usage)  # no answer at all: the server answers 500

    async def _refuse(self, err: ProblemError, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": _WS_POLICY_VIOLATION})
            return
        body = _json(err.to_problem())
        await self._send(send, err.status, body, PROBLEM_CONTENT_TYPE, err.headers(), scope)

    @staticmethod
    async def _send(
        send: Send,
        status: int,
        body: bytes,
        content_type: str,
        headers: Mapping[str, str],
        scope: Scope,
    ) -> None:
        raw_headers = [
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(body)).encode()),
            *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": raw_headers})
        payload = b"" if scope["method"] == "HEAD" else body
        await send({"type": "http.response.body", "body": payload})


def access_claims(request: HTTPConnection) -> AccessClaims:
    """The claims the middleware attached (a FastAPI dependency: ``Depends(access_claims)``).

    ``LookupError`` means the route is not guarded: a programming error, a 500.
    """
    claims = request.scope.get("state", {}).get(STATE_KEY)
    if not isinstance(claims, AccessClaims):
        raise LookupError("no verified access token on this request (is the path guarded?)")
    return claims
