"""Put the ``[[mcp]]`` paths on the x402srv app: ``install_mcp(app, pipeline)``.

One streaming Sanic route per path (POST, GET, DELETE: MCP's Streamable
HTTP). A POST is read whole, up to ``max_body_bytes``, and parsed as one
JSON-RPC message (``messages.parse_message``) before anything else happens;
then:

- ``tools/call`` -> ``McpGate.decide``: a payment-required result or a JSON-RPC
  refusal is answered here; an admitted call is forwarded with the payment
  stripped from its ``_meta``, and its answer rewritten on the way back; its
  credits are settled once, as its result goes out, when it fails, or when its
  buyer left before the result (``_Door.abandoned``: nothing charged if no byte
  of the call went out to the upstream);
- ``tools/list`` -> forwarded, each tool's price added on the way back;
- everything else (``initialize``, ``resources/*``, ``prompts/*``,
  notifications, a client's responses, the GET stream, DELETE) -> forwarded
  as it is, and its answer streamed back untouched.

The upstream client is the gateway's kind (one per worker, no proxy
environment, no redirects, none of httpx's default headers).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, Final

import httpx
from sanic import Request, Sanic
from sanic.response import HTTPResponse, JSONResponse

from x402srv.access.pipeline import AccessPipeline
from x402srv.config.mcp import USAGE_META, McpConfig, ToolUsageCost
from x402srv.errors import UpstreamTimeout, UpstreamUnavailable
from x402srv.gateway.forward import release_upstream
from x402srv.gateway.mcp.decide import McpGate, ToolAnswer, ToolForward, refusal
from x402srv.gateway.mcp.messages import (
    GRANT_META,
    INVALID_PARAMS,
    PAYMENT_META,
    PAYMENT_RESPONSE_META,
    PRICE_META,
    RATELIMIT_META,
    Message,
    RpcError,
    parse_message,
)
from x402srv.gateway.mcp.proxy import Rewrite, send_upstream, stream_answer
from x402srv.gateway.upstreams import upstream_client
from x402srv.gateway.usage import charge, report_cost
from x402srv.server import metrics
from x402srv.server.tasks import to_the_end
from x402srv.tokens.verify import RevocationSource, TokenVerifier
from x402srv.usage.credits import Meter, Usage
from x402srv.usage.unpaid_limit import client_of

__all__ = ["METHODS", "install_mcp"]

log = logging.getLogger("x402srv.gateway.mcp")

METHODS: Final = ("GET", "POST", "DELETE")
_TOOL_NAME_LIMIT: Final = 128
_DRAIN_FACTOR: Final = 8


class _TooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int) -> bytes:
    """The whole body, or ``_TooLarge`` once it passes ``limit``.

    A body over the limit is still read to its end (and dropped), up to
    ``_DRAIN_FACTOR`` times the limit: a client that is still sending when the
    answer comes sees a reset instead of its JSON-RPC error. Past that, the
    connection is cut rather than read on.
    """
    stream: Any = request.stream  # Sanic's Http object; its type does not declare __aiter__
    if stream is None or not stream.request_body:
        return b""
    chunks: list[bytes] = []
    total = 0
    async for chunk in stream:
        total += len(chunk)
        if total > limit * _DRAIN_FACTOR:
            if request.transport is not None:
                request.transport.close()
            raise _TooLarge
        if total <= limit:
            chunks.append(chunk)
    if total > limit:
        raise _TooLarge
    return b"".join(chunks)


@dataclass(slots=True)
class _ToolCall:
    """One admitted ``tools/call`` on its way: how it ended, and whether its credits are settled."""

    decision: ToolForward
    #: For /metrics: ``ok`` or ``tool_error`` once its answer says, ``abandoned`` if its buyer
    #: left before that, else (None) ``upstream_error``.
    outcome: str | None = None
    settled: bool = False
    sent: bool = False  # whether any byte of it went out to the upstream (``sending``)

    def sending(self) -> None:
        """The call's first byte goes out to the upstream (``send_upstream``'s ``sending``)."""
        self.sent = True


def _rpc_response(err: RpcError) -> HTTPResponse:
    return JSONResponse(err.body(), status=err.status, headers={"Cache-Control": "no-store"})


class _Door:
    """One ``[[mcp]]`` path: its gate and what a call's answer gets on its way back."""

    def __init__(self, server: McpConfig, gate: McpGate, meter: Meter | None) -> None:
        self.server = server
        self.gate = gate
        self.meter = meter

    def label(self, tool: str) -> str:
        """A metrics label: listed tools by name, others together (a buyer picks names)."""
        return tool if tool in self.server.tools else "(unlisted)"

    def count(self, tool: str, outcome: str) -> None:
        """One call in /metrics and in the console's counters (``x402srv.usage.counters``)."""
        metrics.current().tool_call(self.label(tool), outcome)
        self.gate.pipeline.counters.add(f"tool:{self.label(tool)}:{outcome}")

    def listed(self) -> Rewrite:
        async def rewrite(document: dict[str, Any]) -> dict[str, Any]:
            result = document.get("result")
            tools = result.get("tools") if isinstance(result, dict) else None
            for tool in tools if isinstance(tools, list) else ():
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    tool["_meta"] = {
                        **_meta_of(tool),
                        PRICE_META: self.gate.listing(tool["name"]),
                    }
            return document

        return rewrite

    def called(self, call: _ToolCall) -> Rewrite:
        async def rewrite(document: dict[str, Any]) -> dict[str, Any]:
            result = document.get("result")
            failed = "error" in document or (
                isinstance(result, dict) and result.get("isError") is True
            )
            call.outcome = "tool_error" if failed else "ok"
            reported = None
            if call.decision.by_use is not None and isinstance(result, dict):
                reported = report_cost(_meta_of(result).get(USAGE_META))
            meta = await self.receipt(call, failed=failed, reported=reported)
            if isinstance(result, dict) and meta:
                result["_meta"] = {**_meta_of(result), **meta}
            elif "error" in document and meta and isinstance(document["error"], dict):
                document["error"]["data"] = {**(document["error"].get("data") or {}), **meta}
            return document

        return rewrite

    async def receipt(
        self,
        call: _ToolCall,
        *,
        failed: bool,
        reported: int | None = None,
        left: bool = False,
        unsent: bool = False,
    ) -> dict[str, Any]:
        """The call's ``_meta``: credits back first if it failed, then what the buyer keeps.

        A tool charged by use settles its reservation here, on the cost its
        result ``reported`` (docs/mcp.md, "Tools charged by use"); on all of it
        when its buyer ``left`` before the result. A call ``unsent`` (no byte of
        it went out to the upstream) gets all of its credits back. Once per
        call: ``call.settled``.
        """
        call.settled = True  # (first: a cancellation in a store step below does not stop it)
        decision = call.decision
        usage = decision.usage
        by_use = decision.by_use
        refund = unsent or (failed and self.server.refund_on_error)
        if usage is not None and by_use is not None and self.meter is not None:
            if left:
                reported = usage.cost
            usage = await self._settle(decision, usage, by_use, 0 if refund else reported, refund)
        elif usage is not None and refund and self.meter is not None:
            usage = await self.meter.refund(usage)
        if usage is not None and usage.cost:
            self.gate.pipeline.counters.add(f"tool:{self.label(decision.tool)}:credits", usage.cost)
        meta: dict[str, Any] = {}
        if decision.granted is not None:
            meta[PAYMENT_RESPONSE_META] = decision.granted.receipt
            if decision.bought_plan and decision.granted.grant.get("type") != "TopUp":
                meta[GRANT_META] = decision.granted.grant
        if usage is not None and (fields := usage.headers()):
            meta[RATELIMIT_META] = {
                "policy": fields["RateLimit-Policy"],
                "limit": fields["RateLimit"],
                "credits": usage.balance,
            }
        if usage is not None and by_use is not None:
            meta[USAGE_META] = {
                "reserved": by_use.reserve,
                "charged": usage.cost,
                "balance": usage.balance,
            }
        return meta

    async def abandoned(self, call: _ToolCall) -> None:
        """The buyer left (or the handler failed) before the call's result went out to it.

        A call of which a byte went out to the upstream keeps what it spent,
        counted as any call's credits are. One charged by use is settled on its
        whole reservation (its result and the cost it reports never came
        through), as a gateway route's call is when its buyer leaves mid-answer
        (docs/selling-calls.md, "Charging by use"): unsettled, it would be
        missing from the grant's calls. A call of which no byte went out (its
        buyer left while x402srv waited for a connection to the upstream) costs
        nothing, as there: the upstream never saw it. Its credits go back, and
        one charged by use is settled at 0.
        """
        usage = call.decision.usage
        if usage is None or call.settled:
            return
        if not call.sent:
            log.info(
                "grant %s on tool %s: the buyer left before the call was sent; charged nothing",
                usage.grant_id,
                self.label(call.decision.tool),
            )
            await self.receipt(call, failed=False, unsent=True)
            return
        if call.decision.by_use is not None:
            log.info(
                "grant %s on tool %s: the buyer left before the result; charged the %d reserved",
                usage.grant_id,
                self.label(call.decision.tool),
                usage.cost,
            )
        await self.receipt(call, failed=False, left=True)

    async def _settle(
        self,
        decision: ToolForward,
        usage: Usage,
        by_use: ToolUsageCost,
        reported: int | None,
        refunded: bool,
    ) -> Usage:
        """The reservation settled once: the report capped, or ``on_missing`` (logged)."""
        assert self.meter is not None
        grant, tool = usage.grant_id, decision.tool
        used = charge(usage.cost, reported, on_missing=by_use.on_missing)
        if reported is None and not refunded:
            log.warning(
                "grant %s on tool %s: the result reported no valid cost; charged %d of %d reserved",
                grant,
                self.label(tool),
                used,
                usage.cost,
            )
        settled = await self.meter.settle(usage, used, route=f"{self.server.path}:{tool}")
        log.info(
            "usage grant=%s tool=%s reserved=%d charged=%d balance=%s",
            grant,
            self.label(tool),
            by_use.reserve,
            settled.cost,
            settled.balance,
        )
        return settled


def install_mcp(
    app: Sanic[Any, Any],
    pipeline: AccessPipeline,
    revocations: RevocationSource | None = None,
) -> None:
    """Add the ``[[mcp]]`` paths of ``pipeline.config`` to ``app`` (nothing if there are none)."""
    config = pipeline.config
    if not config.mcp:
        return
    meter = None
    if config.meters_calls:
        meter = Meter(
            pipeline.store, config.plan_map, clock=pipeline.clock, access_url=config.access_url
        )
    verifier = TokenVerifier.from_config(config, clock=pipeline.clock, revocations=revocations)
    doors = {
        server.path: _Door(server, McpGate(config, server, pipeline, verifier, meter), meter)
        for server in config.mcp
    }

    @app.before_server_start
    async def open_mcp_client(app: Sanic[Any, Any]) -> None:
        app.ctx.mcp_client = upstream_client()  # (shared by every buyer's calls: keeps nothing)

    @app.after_server_stop
    async def close_mcp_client(app: Sanic[Any, Any]) -> None:
        await app.ctx.mcp_client.aclose()

    async def mcp_route(request: Request) -> HTTPResponse | None:
        door = doors[request.path]
        if request.method != "POST":
            return await _forward(request, door, None, None, None, None)
        try:
            body = await _read_body(request, door.server.max_body_bytes)
        except _TooLarge:
            return _rpc_response(
                RpcError(
                    -32600,
                    f"Invalid Request: the message is larger than {door.server.max_body_bytes} "
                    "bytes",
                    status=413,
                )
            )
        try:
            message = parse_message(body)
        except RpcError as err:
            return _rpc_response(err)
        if message.method == "tools/list":
            return await _forward(request, door, body, message, None, door.listed())
        if message.method != "tools/call":
            return await _forward(request, door, body, message, None, None)
        return await _call(request, door, message)

    async def _call(request: Request, door: _Door, message: Message) -> HTTPResponse | None:
        params = message.params
        tool = params.get("name")
        if not isinstance(tool, str) or not tool or len(tool) > _TOOL_NAME_LIMIT:
            return _rpc_response(
                RpcError(
                    INVALID_PARAMS, "Invalid params: tools/call needs a tool name", id=message.id
                )
            )
        meta = params.get("_meta")
        payment = meta.get(PAYMENT_META) if isinstance(meta, dict) else None
        try:
            decision = await door.gate.decide(
                tool,
                payment=payment,
                authorization=request.headers.getall("authorization", []),
                client=client_of(request),
                id=message.id,
            )
        except RpcError as err:
            door.count(tool, "refused")
            return _rpc_response(err)
        if isinstance(decision, ToolAnswer):
            door.count(tool, decision.outcome)
            return JSONResponse(
                {"jsonrpc": "2.0", "id": message.id, "result": decision.result},
                headers={"Cache-Control": "no-store"},
            )
        body = _without_payment(message)
        call = _ToolCall(decision)
        try:
            return await _forward(request, door, body, message, call, door.called(call))
        except asyncio.CancelledError:  # (its buyer left: not the MCP server's failure)
            call.outcome = call.outcome or "abandoned"
            raise
        finally:
            door.count(tool, call.outcome or "upstream_error")
            if not call.settled:  # (Sanic cancels the handler of a buyer who left)
                await to_the_end(door.abandoned(call))

    async def _forward(
        request: Request,
        door: _Door,
        body: bytes | None,
        message: Message | None,
        call: _ToolCall | None,
        rewrite: Rewrite | None,
    ) -> HTTPResponse | None:
        claims = call.decision.claims if call is not None else None
        try:
            upstream = await send_upstream(
                app.ctx.mcp_client,
                door.server,
                request,
                body,
                claims,
                sending=call.sending if call is not None else None,
            )
        except httpx.HTTPError as exc:
            log.warning("MCP upstream %s failed: %s", door.server.upstream, repr(exc))
            problem = (
                UpstreamTimeout("The MCP server did not answer in time.")
                if isinstance(exc, httpx.TimeoutException)
                else UpstreamUnavailable("The MCP server cannot be reached.")
            )
            err = refusal(problem, message.id if message is not None else None)
            if call is not None:  # a paid or metered call: credits back, receipt kept
                # (all of them, whatever ``refund_on_error`` says, if none of it went out)
                receipt = await door.receipt(call, failed=True, unsent=not call.sent)
                err.data = {**(err.data or {}), **receipt}
            err.status = 200 if message is not None and message.kind == "request" else 502
            return _rpc_response(err)
        try:
            answered = await stream_answer(
                request,
                upstream,
                id=message.id if message is not None else None,
                rewrite=rewrite,
                # (a plan bought with the call: its grant, a bearer token, goes in the result)
                stored_nowhere=call is not None and call.decision.granted is not None,
            )
            if call is not None and not answered:
                await door.receipt(call, failed=True)  # no answer reached the buyer
        finally:
            await release_upstream(upstream)  # a cancelled close leaks the connection
        return None

    for index, server in enumerate(config.mcp):
        app.add_route(mcp_route, server.path, methods=METHODS, stream=True, name=f"mcp_{index}")


def _meta_of(holder: dict[str, Any]) -> dict[str, Any]:
    meta = holder.get("_meta")
    return meta if isinstance(meta, dict) else {}


def _without_payment(message: Message) -> bytes:
    """The call as the upstream gets it: the payment is x402srv's business, not the tool's."""
    document = dict(message.document)
    params = dict(message.params)
    meta = params.get("_meta")
    if isinstance(meta, dict) and PAYMENT_META in meta:
        meta = {k: v for k, v in meta.items() if k != PAYMENT_META}
        if meta:
            params["_meta"] = meta
        else:
            params.pop("_meta")
    document["params"] = params
    return json.dumps(document, separators=(",", ":")).encode()
