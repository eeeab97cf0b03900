"""The A2A 0.3.0 agent card (SPEC 4.1), built once from the config."""

from __future__ import annotations

from typing import Any

from .config import Config

__all__ = ["X402_EXTENSION_URI", "agent_card"]

X402_EXTENSION_URI = "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2"


def agent_card(config: Config) -> dict[str, Any]:
    seller, network = config.seller, config.network_info
    url = config.access_url
    a2a_url = f"{seller.agent_url}{config.server.base_path}{config.server.a2a_path}"
    plan_ids = list(config.plan_map)
    first_plan = plan_ids[0]
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
        "version": seller.agent_version,
        "protocolVersion": "0.3.0",
        "capabilities": {
            "extensions": [
                {
                    "uri": X402_EXTENSION_URI,
                    "description": (
                        f"Payments in USDC on {network.name} ({network.caip2}) with x402 v2: "
                        "the exact scheme, settled from an EIP-3009 transferWithAuthorization"
                    ),
                    "required": True,
                }
            ],
            "pushNotifications": False,
            "streaming": False,
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
                    "message/send naming no plan; the plans come back as a data part."
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
                    "the PAYMENT-SIGNATURE header and receive an AccessGrant with a bearer "
                    'token. Over A2A: message/send with a data part {"planId": ...} opens '
                    "a task asking for the payment (x402.payment.required); pay it on that "
                    "task (x402.payment.status payment-submitted) and the completed task "
                    f"holds the AccessGrant. Plans: {', '.join(plan_ids)}."
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
