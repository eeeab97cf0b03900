"""The documents x402srv answers with: 402 offers, AccessGrants, PAYMENT-RESPONSE.

Pure functions of the config and a record. The discovery offer never changes
while a server runs, so it is built (and base64-encoded) once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .config import Config, Plan
from .interfaces import IssuedCredential
from .protocol import encode_header, requirement
from .records import ChallengeRecord

__all__ = ["AccessGranted", "OfferBuilder", "PaymentOffer", "rfc3339"]


def rfc3339(timestamp: float) -> str:
    return datetime.fromtimestamp(int(timestamp), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class PaymentOffer:
    """A 402: the JSON body (PaymentRequired plus our members) and its header value."""

    body: dict[str, Any]
    header: str


@dataclass(frozen=True, slots=True)
class AccessGranted:
    """A 200: the AccessGrant and the PAYMENT-RESPONSE header value."""

    grant: dict[str, Any]
    payment_response: str


class OfferBuilder:
    def __init__(self, config: Config) -> None:
        self._config = config
        self._network = config.network_info
        self.discovery = self._build_discovery()

    def _resource(self, description: str) -> dict[str, Any]:
        return {
            "url": self._config.access_url,
            "description": description,
            "mimeType": "application/json",
        }

    def _build_discovery(self) -> PaymentOffer:
        config, network = self._config, self._network
        accepts = [
            requirement(
                network=network,
                amount=plan.amount,
                pay_to=config.seller.wallet_address,
                max_timeout_seconds=config.server.max_timeout_seconds,
                plan_id=plan.plan_id,
            )
            for plan in config.plan_map.values()
        ]
        required = {
            "x402Version": 2,
            "error": "Payment required: choose a plan and pay one of the accepted requirements",
            "resource": self._resource(config.seller.agent_description),
            "accepts": accepts,
        }
        body = {
            **required,
            "plans": [
                {
                    "planId": plan.plan_id,
                    "unitAmount": plan.unit_amount,
                    "description": plan.description,
                    "amount": str(plan.amount),
                    "asset": network.asset,
                    "network": network.caip2,
                }
                for plan in config.plan_map.values()
            ],
            "walletAddress": config.seller.wallet_address,
            "chainId": network.chain_id,
            "network": network.caip2,
        }
        return PaymentOffer(body=body, header=encode_header(required))

    def offered_requirement(self, record: ChallengeRecord) -> dict[str, Any]:
        """The requirement a challenge was offered with (amounts as stored, not as now)."""
        return requirement(
            network=self._network,
            amount=record.amount,
            pay_to=record.pay_to,
            max_timeout_seconds=record.max_timeout_seconds,
            plan_id=record.plan_id,
            challenge_id=None if record.implicit else record.challenge_id,
            request_id=None if record.implicit else record.request_id,
            asset=record.asset,
        )

    def challenge(self, record: ChallengeRecord, plan: Plan | None) -> PaymentOffer:
        description = plan.description if plan else self._config.seller.agent_description
        required = {
            "x402Version": 2,
            "error": "Payment required: sign the accepted requirement and retry with "
            "PAYMENT-SIGNATURE",
            "resource": self._resource(description),
            "accepts": [self.offered_requirement(record)],
        }
        body = {
            **required,
            "challengeId": record.challenge_id,
            "requestId": record.request_id,
            "planId": record.plan_id,
            "resourceId": record.resource_id,
            "expiresAt": rfc3339(record.expires_at),
        }
        return PaymentOffer(body=body, header=encode_header(required))

    def grant(self, record: ChallengeRecord, credential: IssuedCredential) -> dict[str, Any]:
        assert record.tx_hash is not None
        grant: dict[str, Any] = {
            "type": "AccessGrant",
            "challengeId": record.challenge_id,
            "requestId": record.request_id,
            "planId": record.plan_id,
            "resourceId": record.resource_id,
            "accessToken": credential.token,
            "tokenType": credential.token_type,
            "expiresAt": rfc3339(credential.expires_at),
            "txHash": record.tx_hash,
            "network": record.network,
        }
        explorer = self._network.explorer_url(record.tx_hash)
        if explorer:
            grant["explorerUrl"] = explorer
        return grant

    def granted(self, record: ChallengeRecord) -> AccessGranted:
        assert record.grant is not None
        response = {
            "success": True,
            "transaction": record.tx_hash,
            "network": record.network,
            "payer": record.payer,
        }
        return AccessGranted(grant=record.grant, payment_response=encode_header(response))
