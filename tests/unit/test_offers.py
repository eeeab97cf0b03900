"""402 offers (docs/protocol/wire.md): discovery, a challenge, the requirement it was offered."""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from typing import Any

import pytest

from tests.support.configs import AGENT_URL, SEPOLIA_USDC, WALLET, make_config
from x402srv.access.records import ChallengeRecord
from x402srv.config.models import Config
from x402srv.testing.builders import BASE_TIME, make_record
from x402srv.wire import offers as offers_module
from x402srv.wire.offers import OfferBuilder, rfc3339, with_request_id
from x402srv.wire.payment_identifier import SCHEMA
from x402srv.wire.siwx import SIGN_IN_WITH_X, access_scope, scope_tag

REQUEST_ID = "5b0f3c1e-8a2d-4c6b-9e7f-1a2b3c4d5e6f"

REQUIREMENT_KEYS = {"scheme", "network", "amount", "asset", "payTo", "maxTimeoutSeconds", "extra"}
PAYMENT_REQUIRED_KEYS = {"x402Version", "error", "resource", "accepts", "extensions"}
#: What every 402 declares (docs/payment-identifier.md).
EXTENSIONS = {"payment-identifier": {"info": {"required": False}, "schema": SCHEMA}}


@pytest.fixture(scope="module")
def config() -> Config:
    return make_config(server={"base_path": "/pay", "max_timeout_seconds": 120})


@pytest.fixture(scope="module")
def builder(config: Config) -> OfferBuilder:
    return OfferBuilder(config)


def decode(header: str) -> dict[str, Any]:
    return dict(json.loads(base64.b64decode(header, validate=True)))


def record_for(config: Config, **overrides: Any) -> ChallengeRecord:
    """A daily-plan record as the pipeline would store it for ``config``."""
    fields: dict[str, Any] = {
        "plan_id": "daily",
        "amount": str(config.plan_map["daily"].amount),
        "network": config.network_info.caip2,
        "asset": config.network_info.asset,
        "pay_to": config.seller.wallet_address,
        "max_timeout_seconds": config.server.max_timeout_seconds,
        "resource_id": "city:/paris",
    }
    return make_record(**{**fields, **overrides})


# ------------------------------------------------------------------ discovery


def test_discovery_offers_one_requirement_per_plan(builder: OfferBuilder) -> None:
    body = builder.discovery(REQUEST_ID).body
    assert body["x402Version"] == 2
    assert isinstance(body["error"], str)
    assert body["error"]
    assert body["resource"] == {
        "url": f"{AGENT_URL}/pay/x402/access",
        "description": "Paid hourly weather data",
        "mimeType": "application/json",
    }
    hourly, daily = body["accepts"]
    for accepted in (hourly, daily):
        assert set(accepted) == REQUIREMENT_KEYS
        assert accepted["scheme"] == "exact"
        assert accepted["network"] == "eip155:84532"
        assert accepted["asset"] == SEPOLIA_USDC
        assert accepted["payTo"] == WALLET
        assert accepted["maxTimeoutSeconds"] == 120
    assert hourly["amount"] == "100000"
    assert daily["amount"] == "1500000"
    assert hourly["extra"] == {
        "name": "USDC",
        "version": "2",
        "planId": "hourly",
        "periodSeconds": 3600,
        "requestId": REQUEST_ID,
    }
    assert daily["extra"] == {
        "name": "USDC",
        "version": "2",
        "planId": "daily",
        "periodSeconds": 86400,
        "requestId": REQUEST_ID,
    }


def test_discovery_adds_plans_wallet_and_chain(builder: OfferBuilder) -> None:
    body = builder.discovery().body
    assert set(body) == PAYMENT_REQUIRED_KEYS | {"plans", "walletAddress", "chainId", "network"}
    assert body["plans"] == [
        {
            "planId": "hourly",
            "unitAmount": "$0.10",
            "description": "One hour of API access",
            "amount": "100000",
            "asset": SEPOLIA_USDC,
            "network": "eip155:84532",
            "periodSeconds": 3600,
        },
        {
            "planId": "daily",
            "unitAmount": "$1.50",
            "description": "One day of API access",
            "amount": "1500000",
            "asset": SEPOLIA_USDC,
            "network": "eip155:84532",
            "periodSeconds": 86400,
        },
    ]
    assert body["walletAddress"] == WALLET
    assert body["chainId"] == 84532
    assert body["network"] == "eip155:84532"


def test_discovery_header_is_the_payment_required_part_only(builder: OfferBuilder) -> None:
    offer = builder.discovery()
    header = decode(offer.header)
    assert set(header) == PAYMENT_REQUIRED_KEYS
    assert header == {key: offer.body[key] for key in PAYMENT_REQUIRED_KEYS}


def test_discovery_is_built_once(config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    builder = OfferBuilder(config)
    first = builder.discovery()

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("discovery rebuilt after construction")

    monkeypatch.setattr(offers_module, "requirement", fail)
    monkeypatch.setattr(offers_module, "encode_header", fail)
    again = builder.discovery()
    assert json.loads(again.content) == again.body
    assert decode(again.header)["accepts"] == again.body["accepts"]
    assert without_siwx_info(again.body) == without_siwx_info(first.body)


def without_siwx_info(body: dict[str, Any]) -> dict[str, Any]:
    """The body but its accepts and its sign-in message (a fresh nonce and times per 402)."""
    kept = {k: v for k, v in body.items() if k != "accepts"}
    siwx = kept["extensions"][SIGN_IN_WITH_X]
    kept["extensions"] = {**kept["extensions"], SIGN_IN_WITH_X: {**siwx, "info": None}}
    return kept


def test_each_discovery_402_has_a_fresh_request_id_in_every_requirement(
    builder: OfferBuilder,
) -> None:
    """docs/how-it-works.md: the buyer's secret, one per response, the same in each requirement."""
    seen = set()
    for _ in range(3):
        offer = builder.discovery()
        ids = {a["extra"]["requestId"] for a in offer.body["accepts"]}
        assert ids == {a["extra"]["requestId"] for a in decode(offer.header)["accepts"]}
        (request_id,) = ids
        assert str(uuid.UUID(request_id)) == request_id
        seen.add(request_id)
        # The rest is the catalog, which names no requestId.
        assert offer.body["accepts"] == with_request_id(builder.catalog.body["accepts"], request_id)
    assert len(seen) == 3
    assert all("requestId" not in a["extra"] for a in builder.catalog.body["accepts"])


# ------------------------------------------------------------------ challenge


def test_challenge_offer(config: Config, builder: OfferBuilder) -> None:
    record = record_for(config, expires_at=BASE_TIME + 900)
    offer = builder.challenge(record, config.plan_map["daily"])
    body = offer.body
    assert set(body) == PAYMENT_REQUIRED_KEYS | {
        "challengeId",
        "requestId",
        "planId",
        "resourceId",
        "expiresAt",
    }
    assert body["x402Version"] == 2
    assert body["resource"]["description"] == "One day of API access"
    assert body["resource"]["url"] == f"{AGENT_URL}/pay/x402/access"
    [accepted] = body["accepts"]
    assert accepted == {
        "scheme": "exact",
        "network": "eip155:84532",
        "amount": "1500000",
        "asset": SEPOLIA_USDC,
        "payTo": WALLET,
        "maxTimeoutSeconds": 120,
        "extra": {
            "name": "USDC",
            "version": "2",
            "planId": "daily",
            "periodSeconds": 86400,
            "challengeId": record.challenge_id,
            "requestId": record.request_id,
        },
    }
    assert body["challengeId"] == record.challenge_id
    assert body["requestId"] == record.request_id
    assert (body["planId"], body["resourceId"]) == ("daily", "city:/paris")
    assert body["expiresAt"] == "2023-11-14T22:28:20Z"
    assert decode(offer.header) == {key: body[key] for key in PAYMENT_REQUIRED_KEYS}


def declared_siwx(offer: Any) -> dict[str, Any]:
    declared: dict[str, Any] = json.loads(offer.content)["extensions"][SIGN_IN_WITH_X]
    return declared


def test_a_challenges_siwx_nonce_names_its_plan_and_resource(
    config: Config, builder: OfferBuilder
) -> None:
    record = record_for(config, implicit=False, amount="7", resource_id="a:/b.c-d")
    info = declared_siwx(builder.challenge(record, config.plan_map["daily"]))["info"]
    assert info["nonce"][:16] == scope_tag(config.access_url, access_scope("daily", "a:/b.c-d"))
    assert info["uri"] == config.access_url
    other = declared_siwx(builder.challenge(record, config.plan_map["daily"]))["info"]
    assert other["nonce"] != info["nonce"]  # fresh per answer


@pytest.mark.parametrize("implicit", [False, True])
@pytest.mark.parametrize("description", ["One day of API access", 'quotes " \\ and ünïcode'])
def test_challenge_offer_is_exactly_the_compact_json_of_its_documents(
    config: Config, builder: OfferBuilder, implicit: bool, description: str
) -> None:
    """The templated 402 is byte for byte ``json.dumps`` of the documents it stands for."""
    record = record_for(config, implicit=implicit, amount="7", resource_id="a:/b.c-d")
    plan = dataclasses.replace(config.plan_map["daily"], description=description)
    offer = builder.challenge(record, plan)
    required = {
        "x402Version": 2,
        "error": "Payment required: sign the accepted requirement and retry with PAYMENT-SIGNATURE",
        "resource": {
            "url": config.access_url,
            "description": description,
            "mimeType": "application/json",
        },
        # A discovery-first record's 402 (PENDING again) names its ids too.
        "accepts": [builder.offered_requirement(dataclasses.replace(record, implicit=False))],
        # The sign-in message is made per answer (docs/sign-in-with-x.md): its nonce names
        # this plan and resource at this seller.
        "extensions": {**EXTENSIONS, SIGN_IN_WITH_X: declared_siwx(offer)},
    }
    body = {
        **required,
        "challengeId": record.challenge_id,
        "requestId": record.request_id,
        "planId": record.plan_id,
        "resourceId": record.resource_id,
        "expiresAt": rfc3339(record.expires_at),
    }
    assert offer.content == json.dumps(body, separators=(",", ":")).encode()
    assert base64.b64decode(offer.header) == json.dumps(required, separators=(",", ":")).encode()
    assert offer.body == body


def test_challenge_offer_uses_the_stored_requirement_not_todays_prices(
    config: Config, builder: OfferBuilder
) -> None:
    record = record_for(config, amount="42", max_timeout_seconds=60)
    [accepted] = builder.challenge(record, config.plan_map["daily"]).body["accepts"]
    assert (accepted["amount"], accepted["maxTimeoutSeconds"]) == ("42", 60)


def test_challenge_offer_for_a_removed_plan_describes_the_seller(
    config: Config, builder: OfferBuilder
) -> None:
    body = builder.challenge(record_for(config), None).body
    assert body["resource"]["description"] == "Paid hourly weather data"


def test_offered_requirement_of_an_implicit_record_has_no_ids(
    config: Config, builder: OfferBuilder
) -> None:
    record = record_for(config, implicit=True)
    offered = builder.offered_requirement(record)
    assert offered["extra"] == {
        "name": "USDC",
        "version": "2",
        "planId": "daily",
        "periodSeconds": 86400,
    }
    # the same requirement discovery offered, so the buyer's ``accepted`` matches it
    assert offered == builder.catalog.body["accepts"][1]


def test_offered_requirement_of_an_explicit_record_has_its_ids(
    config: Config, builder: OfferBuilder
) -> None:
    record = record_for(config)
    extra = builder.offered_requirement(record)["extra"]
    assert (extra["challengeId"], extra["requestId"]) == (record.challenge_id, record.request_id)


@pytest.mark.parametrize(
    ("timestamp", "text"),
    [
        (0, "1970-01-01T00:00:00Z"),
        (BASE_TIME, "2023-11-14T22:13:20Z"),
        (BASE_TIME + 0.999, "2023-11-14T22:13:20Z"),
    ],
)
def test_rfc3339_is_utc_with_z(timestamp: float, text: str) -> None:
    assert rfc3339(timestamp) == text
