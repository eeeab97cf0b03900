"""What x402srv does with one ``tools/call``; no HTTP I/O here (docs/mcp.md).

In this order, the first that applies decides:

1. The tool is free (``free = true``) -> ``ToolForward`` with nothing spent.
2. ``Authorization: Bearer`` present: the token must verify (the same checks as
   every guard: signature, expiry, revocation) and its plan must open the tool
   (one of the path's plans, or the tool's own per-call plan); else a JSON-RPC
   error, never a forwarded call. The call spends the tool's credits
   (``x402srv.usage.credits``; a tool charged by use reserves them, and its
   result settles the reservation); credits that ran out give the payment-required
   result for the token's plan (paying it tops the same grant up). A token of a
   plan that sells calls sent with ``_meta["x402/payment"]`` is that top-up: the
   payment is settled by the pipeline as a top-up of the token's grant, then the
   call is metered.
3. ``_meta["x402/payment"]`` present: the paid plan must open the tool (else the
   payment-required result again, nothing settled); then the access pipeline
   settles it exactly as ``POST /x402/access`` would (same checks, claims and
   idempotency: a payment sent again returns the same grant, never a second
   transfer), and the call spends its credits from the grant it bought. A
   per-call plan sells one call, so one payment runs the tool once however often
   it is sent; a failed settlement forwards nothing.
4. Neither: counted against the client's unpaid-request limit, then the
   payment-required result offering the tool's per-call price and the plans
   that open it, built by the same code as the gateway's HTTP 402.

Payment refusals (402, a payment already used, an expired challenge) are
payment-required results, as the x402 MCP transport says; every other refusal
(a bad token, 429, an outage) is a JSON-RPC error whose ``data`` is the
problem details with their stable ``code``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from x402srv.access.pipeline import AccessPipeline
from x402srv.config.mcp import McpConfig, ToolPrice, ToolUsageCost, per_call_plan_id
from x402srv.config.models import Config
from x402srv.errors import (
    ChallengeExpired,
    CreditsExhausted,
    InternalError,
    InvalidToken,
    PaymentFailed,
    ProblemError,
    TokenExpired,
    TxAlreadyRedeemed,
)
from x402srv.gateway.decide import narrowed_offer
from x402srv.gateway.mcp.messages import REFUSED, RpcError, payment_required_result
from x402srv.tokens import admission
from x402srv.tokens.verify import AccessClaims, TokenVerifier
from x402srv.usage.credits import Meter, Usage
from x402srv.wire.offers import AccessGranted
from x402srv.wire.protocol import AccessBody, PaymentPayload, parse_payment_payload

__all__ = ["McpGate", "ToolAnswer", "ToolForward", "refusal"]

log = logging.getLogger("x402srv.gateway.mcp")

#: Purchases made over MCP are the same purchases as at /x402/access.
_RESOURCE_ID = "default"
#: Refusals that are about the payment: the buyer pays (again) rather than debugs.
_PAYMENT_REFUSALS = (PaymentFailed, TxAlreadyRedeemed, ChallengeExpired)


@dataclass(frozen=True, slots=True)
class ToolForward:
    """Run the call upstream; ``granted`` when a payment came with it, ``usage`` when metered."""

    tool: str
    claims: AccessClaims | None = None
    granted: AccessGranted | None = None
    usage: Usage | None = None
    bought_plan: bool = False  # the payment bought a plan (its token goes back in ``_meta``)
    by_use: ToolUsageCost | None = None  # ``usage`` is a reservation the result settles


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """Answer the call with this tool result (payment required); nothing forwarded."""

    tool: str
    result: dict[str, Any]
    outcome: str  # for /metrics: payment_required, credits_exhausted, payment_refused


def refusal(err: ProblemError, id: str | int | None) -> RpcError:
    """A refusal as a JSON-RPC error: the problem details (no ``type``) in ``data``."""
    problem = {k: v for k, v in err.to_problem().items() if k != "type"}
    return RpcError(REFUSED, f"{err.code}: {err.detail}", data=problem, status=200, id=id)


class McpGate:
    """The tool-call decisions of one ``[[mcp]]`` path."""

    def __init__(
        self,
        config: Config,
        server: McpConfig,
        pipeline: AccessPipeline,
        verifier: TokenVerifier,
        meter: Meter | None,
    ) -> None:
        self.config = config
        self.server = server
        self.pipeline = pipeline
        self.verifier = verifier
        self.meter = meter
        self.plans = tuple(server.plans or config.seller_plan_ids)

    # ------------------------------------------------------------ prices

    def price(self, tool: str) -> ToolPrice:
        return self.server.price_of(tool)

    def plans_for(self, tool: str) -> tuple[str, ...]:
        """The plans that open ``tool``: its per-call plan first, then the path's."""
        price = self.price(tool)
        own = (per_call_plan_id(tool),) if price.price is not None else ()
        return own + self.plans

    def listing(self, tool: str) -> dict[str, Any]:
        """What ``tools/list`` shows of a tool's price (``_meta["x402srv/price"]``)."""
        price = self.price(tool)
        if price.free:
            return {"free": True, "summary": "free"}
        shown: dict[str, Any] = {
            "free": False,
            "summary": price.describe(),
            "credits": price.credits,
            "plans": list(self.plans),
        }
        if price.usage is not None:  # ``credits`` is the most a call can cost
            shown["byUse"] = {"reserve": price.usage.reserve}
        if price.price is not None:
            shown["perCall"] = {"price": price.price, "planId": per_call_plan_id(tool)}
        return shown

    def offer(
        self,
        tool: str,
        error: str | None = None,
        *,
        plans: tuple[str, ...] | None = None,
        members: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The tool's PaymentRequired: the same requirements as the HTTP 402."""
        offer = narrowed_offer(
            self.pipeline,
            plans or self.plans_for(tool),
            resource={
                "url": f"mcp://tool/{tool}",
                "description": self.server.description or f"MCP tool {tool}",
                "mimeType": "application/json",
            },
            error=error
            or f"Payment required to call {tool}: pay one of the accepted requirements and "
            'repeat the call with _meta["x402/payment"]',
            members=members,
        )
        return offer.body

    def _answer(self, tool: str, outcome: str, **kwargs: Any) -> ToolAnswer:
        return ToolAnswer(tool, payment_required_result(self.offer(tool, **kwargs)), outcome)

    # ------------------------------------------------------------ the decision

    async def decide(
        self,
        tool: str,
        *,
        payment: object | None,
        authorization: Sequence[str],
        client: str | None,
        id: str | int | None,
    ) -> ToolForward | ToolAnswer:
        """See the module docstring; refusals are raised as ``RpcError``."""
        if self.price(tool).free:
            return ToolForward(tool)
        try:
            if authorization:
                return await self._with_token(tool, authorization, payment, client)
            if payment is not None:
                return await self._paid(tool, self._payment(payment), client)
            await self.pipeline.limit_unpaid(client)
            return self._answer(tool, "payment_required")
        except _PAYMENT_REFUSALS as err:
            return self._answer(
                tool,
                "payment_refused",
                error=f"{err.code}: {err.detail}",
                members={k: v for k, v in err.to_problem().items() if k not in ("type", "title")},
            )
        except ProblemError as err:
            raise refusal(err, id) from None

    @staticmethod
    def _payment(payment: object) -> PaymentPayload:
        return parse_payment_payload(payment, where='_meta["x402/payment"]')

    async def _with_token(
        self, tool: str, authorization: Sequence[str], payment: object | None, client: str | None
    ) -> ToolForward | ToolAnswer:
        result = await admission.admit(self.verifier, authorization)
        if not isinstance(result, AccessClaims):
            raise result
        if result.plan_id not in self.plans_for(tool):
            raise InvalidToken(
                f"A token for plan {result.plan_id!r} does not open the tool {tool!r}; "
                f"it needs one of: {', '.join(self.plans_for(tool))}."
            )
        plan = self.config.plan_map[result.plan_id]
        if payment is not None and plan.calls is not None:
            return await self._top_up(tool, result, self._payment(payment), client)
        return await self._metered(tool, result)

    async def _top_up(
        self, tool: str, claims: AccessClaims, payment: PaymentPayload, client: str | None
    ) -> ToolForward | ToolAnswer:
        if payment.extra_str("planId") != claims.plan_id:
            return self._answer(
                tool,
                "payment_refused",
                error=f"a grant of plan {claims.plan_id!r} is topped up by paying that plan",
                plans=(claims.plan_id,),
            )
        result = await self.pipeline.access(
            AccessBody(None, None, _RESOURCE_ID),
            payment,
            client=client,
            top_up_of=claims.challenge_id,
        )
        if not isinstance(result, AccessGranted):  # (only without a payment; kept total)
            return self._answer(tool, "payment_required")
        return await self._metered(tool, claims, result)

    async def _paid(
        self, tool: str, payment: PaymentPayload, client: str | None
    ) -> ToolForward | ToolAnswer:
        plan_id = payment.extra_str("planId")
        if plan_id not in self.plans_for(tool):
            await self.pipeline.limit_unpaid(client)  # nothing tried: an unpaid call
            return self._answer(
                tool,
                "payment_refused",
                error=f"plan {plan_id!r} does not open the tool {tool!r}; pay one of the "
                "accepted requirements",
            )
        result = await self.pipeline.access(
            AccessBody(None, None, _RESOURCE_ID), payment, client=client
        )
        if not isinstance(result, AccessGranted):  # (only without a payment; kept total)
            return self._answer(tool, "payment_required")
        try:
            claims = await self.verifier.verify(result.grant["accessToken"])
        except TokenExpired:
            return self._answer(
                tool,
                "payment_refused",
                error="the access this payment bought has expired; pay again for more",
            )
        except ProblemError:
            raise
        except Exception:
            log.exception("the token of %s does not verify", result.grant["challengeId"])
            raise InternalError() from None
        return await self._metered(tool, claims, result)

    async def _metered(
        self, tool: str, claims: AccessClaims, granted: AccessGranted | None = None
    ) -> ToolForward | ToolAnswer:
        """Spend the tool's credits (one of a per-call plan's one) before it runs."""
        per_call = claims.plan_id == per_call_plan_id(tool)
        cost = 1 if per_call else self.price(tool).credits
        if self.meter is None:
            return ToolForward(tool, claims, granted, bought_plan=not per_call)
        try:
            usage = await self.meter.spend(claims, cost)
        except CreditsExhausted as spent:
            if per_call:  # the one call this payment bought has run
                return self._answer(
                    tool,
                    "credits_exhausted",
                    error="this payment already paid for one call of this tool; pay again "
                    "for another",
                )
            problem = spent.to_problem()
            return self._answer(
                tool,
                "credits_exhausted",
                error="credits exhausted: pay again to top up this grant (keep sending its token)",
                plans=(claims.plan_id,),
                members={k: v for k, v in problem.items() if k not in ("type", "title")},
            )
        by_use = self.price(tool).usage if not per_call and usage and usage.cost else None
        return ToolForward(tool, claims, granted, usage, bought_plan=not per_call, by_use=by_use)
