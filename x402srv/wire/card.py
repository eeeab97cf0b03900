"""The agent cards (docs/protocol/wire.md), built once from config: A2A 1.0 and 0.3.0.

``agent_card_v1`` is the 1.0 card: exactly the fields of 1.0's ``AgentCard``
(no ``url``, ``preferredTransport``, ``additionalInterfaces``,
``protocolVersion`` or ``capabilities.stateTransitionHistory``: the 1.0 schema
allows no other field). ``agent_card`` is the 0.3.0 card below; which of the two
a request gets is decided by ``card_version`` (docs/a2a.md, "Two agent cards").

Every field a 0.3 client reads keeps its 0.3 value (``protocolVersion: "0.3.0"``,
``url``, ``preferredTransport``, ``additionalInterfaces``, the skills, the x402
extension). ``supportedInterfaces`` is what 1.0 clients read instead (0.3
clients ignore it): each URL that speaks JSON-RPC is listed once per version,
1.0 first, as the ``a2a-sdk`` client prefers; the server tells the two apart by
the ``A2A-Version`` header. ``capabilities.streaming`` is true because
``message/stream`` and ``tasks/resubscribe`` (and 1.0's SendStreamingMessage and
SubscribeToTask) are served.
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal

from x402srv.config.models import Config
from x402srv.config.plans import describe

__all__ = ["X402_EXTENSION_URI", "agent_card", "agent_card_v1", "card_version"]

X402_EXTENSION_URI = "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2"

#: Fields of the 0.3 card that 1.0's AgentCard does not have.
_V03_ONLY: Final = ("url", "preferredTransport", "additionalInterfaces", "protocolVersion")
_MAJOR = re.compile(r"\s*(\d{1,3})(?:\.\d{1,3}){0,2}\s*")


def card_version(header: str | None) -> Literal["1.0", "0.3"]:
    """The card a GET receives: 1.0 when ``A2A-Version`` names 1.x, else the 0.3 card.

    Both paths answer the same card for the same request (docs/protocol/wire.md,
    "The agent card"): 0.3-era clients, the ``a2a-sdk`` 0.3 resolver among them,
    read ``agent-card.json`` without the header and need the card with ``url``.
    A header naming no version we serve is ignored here: the card is how a
    client finds out what we speak.
    """
    match = _MAJOR.fullmatch(header or "")
    return "1.0" if match and match.group(1) == "1" else "0.3"


def agent_card_v1(config: Config) -> dict[str, Any]:
    """The A2A 1.0 card: the 0.3 card's content in 1.0's fields only."""
    card = {k: v for k, v in agent_card(config).items() if k not in _V03_ONLY}
    capabilities = dict(card["capabilities"])
    del capabilities["stateTransitionHistory"]
    card["capabilities"] = {**capabilities, "extendedAgentCard": False}
    return card


def agent_card(config: Config) -> dict[str, Any]:
    seller = config.seller
    where = ", ".join(f"{n.name} ({n.caip2})" for n in config.resolved_networks)
    url = config.access_url
    a2a_url = f"{seller.agent_url}{config.server.base_path}{config.server.a2a_path}"
    plan_ids = list(config.plan_map)
    first_plan = plan_ids[0]
    # What each plan includes, so an agent compares plans from the card alone.
    plans = "; ".join(
        f"{plan.plan_id} ({plan.unit_amount}: {describe(plan)})"
        for plan in config.plan_map.values()
    )
    return {
        "name": seller.agent_name,
        "description": seller.agent_description,
        "url": url,
        # Both URLs speak A2A JSON-RPC; the card's url also keeps plain x402 over HTTP.
        "preferredTransport": "JSONRPC",
        "additionalInterfaces": [
            {"url": url, "transport": "JSONRPC"},
            {"url": a2a_url, "transport": "JSONRPC"},
        ],
        "supportedInterfaces": [
            {"url": where, "protocolBinding": "JSONRPC", "protocolVersion": version}
            for version in ("1.0", "0.3")
            for where in (url, a2a_url)
        ],
        "version": seller.agent_version,
        "protocolVersion": "0.3.0",
        "capabilities": {
            "extensions": [
                {
                    "uri": X402_EXTENSION_URI,
                    "description": (
                        f"Payments in USDC on {where} with x402 v2: the exact scheme, "
                        "settled from an EIP-3009 transferWithAuthorization"
                    ),
                    "required": True,
                }
            ],
            "pushNotifications": False,
            "streaming": True,
            "stateTransitionHistory": False,
        },
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["application/json"],
        "skills": [
            {
                "id": "discover-products",
                "name": "Discover products",
                "description": (
                    f"Free. POST {{}} to {url} to list the plans: plan ids, prices, the "
                    "wallet address and chain id (answered as an HTTP 402 offer). Over A2A: "
                    "a message naming no plan opens a task that lists every plan (a data "
                    "part) and asks for one (input-required)."
                ),
                "tags": ["catalog", "pricing", "x402"],
                "examples": ["What plans do you offer?", f"POST {url} with body {{}}"],
            },
            {
                "id": "request-access",
                "name": "Request access",
                "description": (
                    f'Paid. POST {{"planId": ...}} to {url} for a 402 challenge, sign an '
                    "EIP-3009 transferWithAuthorization for it, retry the same request with "
                    "the PAYMENT-SIGNATURE header and receive an AccessGrant, which the "
                    "seller's API takes as Authorization: Bearer. Over A2A: a message with a "
                    'data part {"planId": ...} (or naming the plan, also on the catalog '
                    "task) gets a task asking for the payment (x402.payment.required); pay "
                    "it on that task (x402.payment.status payment-submitted) and the "
                    "completed task holds the AccessGrant; message/stream shows the "
                    f"settlement as it happens. Plans: {plans}."
                ),
                "tags": ["payment", "access", "x402"],
                "examples": [
                    f"Buy the {first_plan} plan",
                    f'POST {url} with body {{"planId": "{first_plan}"}}',
                ],
            },
        ],
        "provider": {"organization": seller.provider_name, "url": seller.provider_url},
    }
