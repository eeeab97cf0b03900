"""``[[networks]]``: several networks and tokens, plan options, and the payment's own option.

A catalogue on two chains with three tokens (6 and 18 decimals) is resolved,
offered and checked here without a chain: payments are signed for real for
tokens described by hand and run through the pipeline on the memory store.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from tests.support.configs import BUYER, NOW, WALLET, config_dict, token_for
from tests.support.scripted import ScriptedSettler
from x402srv.access.pipeline import AccessPipeline, AccessResult, payment_key
from x402srv.access.records import State
from x402srv.config.models import Config, parse_config
from x402srv.default_plugins.jwt_issuer import build_jwt_issuer
from x402srv.default_plugins.memory_store import MemoryStore
from x402srv.devchain import sign_transfer_authorization
from x402srv.errors import ConfigError, PaymentFailed, ProblemError
from x402srv.interfaces import Settled
from x402srv.server.plugin_context import PluginContext
from x402srv.wire.offers import (
    MAX_PAYMENT_REQUIRED_BYTES,
    AccessGranted,
    OfferBuilder,
    PaymentOffer,
)
from x402srv.wire.protocol import AccessBody, parse_payment_payload
from x402srv.wire.reasons import Reason

CHAIN_A, CHAIN_B = 31337, 31338
USD6 = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
USD18 = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"
USD_B = "0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0"
TX = "0x" + "ab" * 32


def two_chains(**extra: Any) -> dict[str, Any]:
    """Two custom chains: A with a 6- and an 18-decimal token, B with one 6-decimal token."""
    document = config_dict()
    del document["seller"]["network"]
    document["networks"] = [
        {
            "network": f"eip155:{CHAIN_A}",
            "rpc_url": "http://127.0.0.1:8545",
            "tokens": [
                {"asset": USD6, "name": "USD Coin", "version": "2", "decimals": 6},
                {"asset": USD18, "name": "Dollar18", "version": "1", "decimals": 18},
            ],
            "settlers": [
                {"facilitator_url": "http://127.0.0.1:9/v1/key-abc123"},
                {"facilitator_url": "https://good.example.com"},
            ],
        },
        {
            "network": f"eip155:{CHAIN_B}",
            "tokens": [{"asset": USD_B, "name": "USD Coin", "version": "2", "decimals": 6}],
        },
    ]
    document["settlement"] = {"facilitator_url": "https://fallback.example.com"}
    document.update(copy.deepcopy(extra))
    return document


def make(document: dict[str, Any]) -> Config:
    return parse_config(document, env={})


def config_error(document: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        make(document)
    return str(caught.value)


# ---------------------------------------------------------------- resolution


def test_every_network_with_its_tokens_and_settlers_in_order() -> None:
    config = make(two_chains())
    a, b = config.resolved_networks
    assert (a.caip2, a.chain_id, b.caip2) == (f"eip155:{CHAIN_A}", CHAIN_A, f"eip155:{CHAIN_B}")
    assert [(t.asset, t.decimals) for t in a.tokens] == [(USD6, 6), (USD18, 18)]
    assert [o.asset_name for o in a.options] == ["USD Coin", "Dollar18"]
    assert [s.label for s in a.settlers] == [
        f"facilitator http://127.0.0.1:9/v1/<redacted> #1 on eip155:{CHAIN_A}",
        f"facilitator https://good.example.com #2 on eip155:{CHAIN_A}",
    ]
    # a network without settlers of its own is settled by [settlement]
    assert [(s.path, s.label) for s in b.settlers] == [
        ("settlement", f"facilitator https://fallback.example.com #1 on eip155:{CHAIN_B}")
    ]
    assert config.network_info == a.options[0]  # the first network's first token
    assert config.option(f"eip155:{CHAIN_A}", USD18.lower()) == a.options[1]
    assert config.option(f"eip155:{CHAIN_B}", USD6) is None


def test_a_price_becomes_exact_amounts_in_each_tokens_decimals() -> None:
    plan = make(two_chains()).plan_map["hourly"]  # $0.10
    assert [(o.network.caip2, o.network.asset, o.amount) for o in plan.options] == [
        (f"eip155:{CHAIN_A}", USD6, 100_000),
        (f"eip155:{CHAIN_A}", USD18, 10**17),
        (f"eip155:{CHAIN_B}", USD_B, 100_000),
    ]
    assert plan.amount == 100_000


def test_a_price_that_would_need_rounding_in_one_token_is_refused_at_start_up() -> None:
    document = two_chains()
    document["plans"][0]["unit_amount"] = "$0.0000001"  # fine in 18 decimals, not in 6
    message = config_error(document)
    assert "plans[0].unit_amount: $0.0000001 has more decimals than the token's 6" in message
    assert f"({USD6} on eip155:{CHAIN_A}); it would have to be rounded" in message


def test_a_plan_restricted_to_some_networks_offers_only_theirs() -> None:
    document = two_chains()
    document["plans"][1]["networks"] = [f"eip155:{CHAIN_B}"]
    config = make(document)
    daily = config.plan_map["daily"]
    assert [o.network.asset for o in daily.options] == [USD_B]
    assert daily.amount == 1_500_000


def test_a_plan_naming_a_network_that_is_not_configured_is_refused() -> None:
    document = two_chains()
    document["plans"][0]["networks"] = ["base"]
    assert "plans[0].networks[0]: 'base' is not a configured network" in config_error(document)
    document["plans"][0]["networks"] = ["nowhere"]
    assert "plans[0].networks[0]: unknown network 'nowhere'" in config_error(document)


def test_known_networks_bring_their_usdc_rpc_and_a_custom_id_stays_custom() -> None:
    document = config_dict()
    del document["seller"]["network"]
    document["networks"] = [
        {"network": "base"},
        {"network": "polygon", "rpc_url": "https://polygon.example.com/key"},
        # Base's chain id as a custom network: its own token, nothing assumed
        {
            "network": "eip155:84532",
            "tokens": [{"asset": USD6, "name": "Mine", "version": "9", "decimals": 6}],
        },
    ]
    base, polygon, custom = make(document).resolved_networks
    assert base.tokens[0].asset == "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
    assert (base.tokens[0].name, base.rpc_url) == ("USD Coin", "https://mainnet.base.org")
    assert polygon.tokens[0].asset == "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359"
    assert polygon.rpc_url == "https://polygon.example.com/key"
    assert (custom.name, custom.tokens[0].name, custom.default_facilitator_url) == (
        "eip155:84532",
        "Mine",
        None,
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["networks"][1].pop("tokens"),
            f"networks[1].tokens: required for a custom network eip155:{CHAIN_B}",
        ),
        (
            lambda d: d["networks"][1].update(network=f"eip155:{CHAIN_A}"),
            f"networks[1].network: eip155:{CHAIN_A} is already declared by networks[0]",
        ),
        (
            lambda d: d["networks"][0]["tokens"][1].update(asset=USD6.lower()),
            f"networks[0].tokens[1].asset: {USD6} is listed twice",
        ),
        (
            lambda d: d["networks"][0]["tokens"][0].pop("decimals"),
            "networks[0].tokens[0].decimals: ",
        ),
        (
            lambda d: d["seller"].update(network="base"),
            "seller.network: not with [[networks]]",
        ),
        (lambda d: d.update(network={"rpc_url": "http://x.example"}), "network: not with"),
        (
            lambda d: d["settlement"].update(rpc_url="http://x.example"),
            "settlement.rpc_url: not with [[networks]]",
        ),
        (
            lambda d: d["networks"][0]["settlers"][1].update(strategy="gas-wallet"),
            "networks[0].settlers[1].facilitator_url: only for the facilitator strategy",
        ),
        (lambda d: d.pop("networks"), "seller.network: required (or declare the networks"),
    ],
)
def test_mistakes_name_their_key(edit: Any, message: str) -> None:
    document = two_chains()
    edit(document)
    assert message in config_error(document)


def test_plugin_options_resolve_secret_references_in_the_configs_environment() -> None:
    """``{ env = ... }`` in a plugin's table reads ``Config.env``, never ``os.environ``."""
    from pydantic import BaseModel, ConfigDict

    from x402srv.config.secrets import SecretValue

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")
        token: SecretValue

    document = two_chains()
    document["networks"][1]["settlers"] = [{"strategy": "relayer"}]
    document["settlement"] = {"relayer": {"token": {"env": "RELAYER_TOKEN"}}}
    config = parse_config(document, env={"RELAYER_TOKEN": "from-the-config-env"})
    ctx = PluginContext(
        config=config,
        name="relayer",
        key_path="settlement.relayer",
        options=config.settlement.plugin_options("relayer"),
    )
    assert ctx.parse_options(Options).token.reveal() == "from-the-config-env"


# ---------------------------------------------------------------- offers


def test_discovery_lists_every_option_of_every_plan_plan_by_plan() -> None:
    config = make(two_chains())
    body = OfferBuilder(config).discovery().body
    assert [
        (a["extra"]["planId"], a["network"], a["asset"], a["amount"]) for a in body["accepts"]
    ] == [
        ("hourly", f"eip155:{CHAIN_A}", USD6, "100000"),
        ("hourly", f"eip155:{CHAIN_A}", USD18, str(10**17)),
        ("hourly", f"eip155:{CHAIN_B}", USD_B, "100000"),
        ("daily", f"eip155:{CHAIN_A}", USD6, "1500000"),
        ("daily", f"eip155:{CHAIN_A}", USD18, str(15 * 10**17)),
        ("daily", f"eip155:{CHAIN_B}", USD_B, "1500000"),
    ]
    assert [a["extra"]["name"] for a in body["accepts"][:3]] == ["USD Coin", "Dollar18", "USD Coin"]
    assert body["networks"] == [f"eip155:{CHAIN_A}", f"eip155:{CHAIN_B}"]
    assert body["plans"][0]["options"][1] == {
        "network": f"eip155:{CHAIN_A}",
        "asset": USD18,
        "amount": str(10**17),
        "decimals": 18,
    }


def test_an_oversized_payment_required_header_is_reported_per_plan(
    caplog: pytest.LogCaptureFixture,
) -> None:
    document = two_chains()
    document["networks"][0]["tokens"] = [
        {
            "asset": "0x" + f"{n:040x}",
            "name": "USD Coin " + "x" * 100,
            "version": "2",
            "decimals": 6,
        }
        for n in range(1, 17)
    ]
    document["plans"][1]["networks"] = [f"eip155:{CHAIN_B}"]
    config = make(document)
    with caplog.at_level(logging.WARNING, logger="x402srv.wire.offers"):
        builder = OfferBuilder(config)
    assert len(builder.discovery().header) > MAX_PAYMENT_REQUIRED_BYTES
    warned = [r.getMessage() for r in caplog.records]
    assert any("the discovery 402" in m and "split the plans by route" in m for m in warned)
    assert any(m.startswith("plan hourly: its 402 offers 17 networks and tokens") for m in warned)
    assert not any(m.startswith("plan daily") for m in warned)


# ---------------------------------------------------------------- payments


class Rig:
    """The pipeline on the memory store with a scripted settler; no chain."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.settler = ScriptedSettler()
        ctx = PluginContext(config=config, name="jwt", key_path="credentials.jwt", clock=self.now)
        self.pipeline = AccessPipeline(
            config,
            store=MemoryStore(),
            settler=self.settler,
            issuer=build_jwt_issuer(ctx),
            chain=None,
            clock=self.now,
        )

    @staticmethod
    def now() -> float:
        return float(NOW)

    async def challenge(self, plan_id: str = "hourly") -> dict[str, Any]:
        offer = await self.pipeline.access(AccessBody(plan_id, None, "default"), None)
        assert isinstance(offer, PaymentOffer)
        return offer.body

    async def pay(
        self, accepted: dict[str, Any], *, value: int | None = None, sign_for: Any = None
    ) -> AccessResult | ProblemError:
        option = sign_for or self.config.option(accepted["network"], accepted["asset"])
        option = option or self.config.network_info  # (an option nobody offers: any domain)
        token = token_for(option)
        signature, authorization = sign_transfer_authorization(
            BUYER,
            token,
            to=accepted["payTo"],
            value=int(accepted["amount"]) if value is None else value,
            valid_after=NOW - 60,
            valid_before=NOW + 120,
            nonce=bytes.fromhex("42" * 32),
        )
        wire = {
            "x402Version": 2,
            "payload": {"signature": signature, "authorization": authorization},
            "accepted": accepted,
        }
        body = AccessBody(accepted["extra"]["planId"], None, "default")
        try:
            return await self.pipeline.access(body, parse_payment_payload(wire))
        except ProblemError as exc:
            return exc


@pytest.mark.parametrize("index", [0, 1, 2])
async def test_each_option_of_a_challenge_is_paid_on_its_network_with_its_token(index: int) -> None:
    rig = Rig(make(two_chains()))
    rig.settler.then(Settled(TX, BUYER.address))
    challenge = await rig.challenge()
    assert len(challenge["accepts"]) == 3
    accepted = challenge["accepts"][index]
    answer = await rig.pay(accepted)
    assert isinstance(answer, AccessGranted), answer
    [request] = rig.settler.requests
    assert (request.network.caip2, request.network.asset) == (
        accepted["network"],
        accepted["asset"],
    )
    assert request.requirements["amount"] == accepted["amount"]
    assert request.requirements["extra"]["name"] == accepted["extra"]["name"]
    record = await rig.pipeline.store.get_challenge(challenge["challengeId"])
    assert record is not None and record.state is State.DELIVERED
    assert (record.network, record.asset, record.amount) == (
        accepted["network"],
        accepted["asset"],
        accepted["amount"],
    )
    assert answer.grant["network"] == accepted["network"]


async def test_the_6_decimal_token_at_the_18_decimal_amount_and_the_reverse_are_refused() -> None:
    rig = Rig(make(two_chains()))
    challenge = await rig.challenge()
    six, eighteen, _ = challenge["accepts"]
    for claimed, amount_of in ((six, eighteen), (eighteen, six)):
        accepted = {**claimed, "amount": amount_of["amount"]}
        answer = await rig.pay(accepted)
        assert isinstance(answer, PaymentFailed), answer
        assert answer.reason == Reason.INVALID_PAYMENT_REQUIREMENTS
        # the right requirement, but the authorization for the other token's amount
        answer = await rig.pay(claimed, value=int(amount_of["amount"]))
        assert isinstance(answer, PaymentFailed)
        assert answer.reason == Reason.VALUE_MISMATCH
    assert rig.settler.requests == []


async def test_a_payment_signed_for_the_other_tokens_domain_is_refused() -> None:
    rig = Rig(make(two_chains()))
    six, eighteen, _ = (await rig.challenge())["accepts"]
    other = rig.config.option(eighteen["network"], eighteen["asset"])
    answer = await rig.pay(six, sign_for=other)
    assert isinstance(answer, PaymentFailed)
    assert answer.reason == Reason.INVALID_SIGNATURE


async def test_a_network_or_token_the_challenge_does_not_offer_is_refused() -> None:
    document = two_chains()
    document["plans"][0]["networks"] = [f"eip155:{CHAIN_A}"]
    rig = Rig(make(document))
    challenge = await rig.challenge()
    assert {a["network"] for a in challenge["accepts"]} == {f"eip155:{CHAIN_A}"}
    elsewhere = {**challenge["accepts"][0], "network": f"eip155:{CHAIN_B}", "asset": USD_B}
    answer = await rig.pay(elsewhere)
    assert isinstance(answer, PaymentFailed)
    assert answer.reason == Reason.INVALID_NETWORK
    other_token = {**challenge["accepts"][0], "asset": WALLET}
    answer = await rig.pay(other_token)
    assert isinstance(answer, PaymentFailed)
    assert answer.reason in (Reason.INVALID_PAYMENT_REQUIREMENTS, Reason.INVALID_NETWORK)


def test_a_claim_keys_on_the_network_and_token_the_payment_names() -> None:
    def payment(network: str, asset: str) -> Any:
        accepted = {
            "scheme": "exact",
            "network": network,
            "asset": asset,
            "amount": "1",
            "payTo": WALLET,
            "maxTimeoutSeconds": 60,
        }
        auth = {
            "from": BUYER.address,
            "to": WALLET,
            "value": "1",
            "validAfter": "0",
            "validBefore": "1",
            "nonce": "0x" + "42" * 32,
        }
        wire = {"x402Version": 2, "payload": {"signature": "0x00", "authorization": auth}}
        return parse_payment_payload({**wire, "accepted": accepted})

    on_a = payment_key(payment(f"eip155:{CHAIN_A}", USD6))
    on_b = payment_key(payment(f"eip155:{CHAIN_B}", USD6))
    assert (on_a.chain_id, on_b.chain_id) == (CHAIN_A, CHAIN_B)
    assert str(on_a) != str(on_b)  # the same nonce on two chains is two payments
    with pytest.raises(PaymentFailed) as refused:
        payment_key(payment("solana:mainnet", USD6))
    assert refused.value.reason == Reason.INVALID_NETWORK


async def test_a_gateway_route_offers_every_option_of_its_own_plans_only() -> None:
    """Splitting a catalogue by route: each route's 402 carries its plans' options only."""
    from x402srv.server.app import create_app

    document = two_chains(
        routes=[{"prefix": "/api", "upstream": "http://127.0.0.1:9", "plans": ["daily"]}]
    )
    document["store"] = {"backend": "memory"}
    document["reconciler"] = {"enabled": False}
    app = create_app(make(document), name="gateway_options")
    _, response = await app.asgi_client.get("/api/forecast")
    assert response.status_code == 402
    body = response.json
    assert [(a["extra"]["planId"], a["network"], a["asset"]) for a in body["accepts"]] == [
        ("daily", f"eip155:{CHAIN_A}", USD6),
        ("daily", f"eip155:{CHAIN_A}", USD18),
        ("daily", f"eip155:{CHAIN_B}", USD_B),
    ]
    assert body["networks"] == [f"eip155:{CHAIN_A}", f"eip155:{CHAIN_B}"]
