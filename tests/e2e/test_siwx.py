"""sign-in-with-x (docs/sign-in-with-x.md) on two instances behind one public URL.

Two x402srv instances share one Redis and one ``agent_url`` (the first's
address, standing for the public URL a load balancer answers at): their 402s
declare that URL, their tokens name it, so a message signed for one is good at
either. The tests talk to each instance directly. A buyer pays at the first and
signs in at the second, over /x402/access and through the gateway; one message
sent to both at once is used once. Contract wallets sign in too: a deployed
ERC-1271 wallet and a counterfactual one (EIP-6492), checked through anvil.
The SDK buyer samples (a fresh process holding only the key) run in
tests/docs/test_sample_siwx.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from eth_account import Account as LocalAccountFactory
from eth_account.signers.local import LocalAccount
from eth_utils.crypto import keccak
from x402.extensions.sign_in_with_x import (
    SIGN_IN_WITH_X,
    build_siwx_schema,
    create_siwx_payload,
    encode_siwx_header,
    sign_evm_message,
)
from x402srv_redis import RedisOptions, RedisStore

from tests.support.apps import AppProcess
from tests.support.seller import Seller, decode_header
from tests.support.siwx import (
    SmartWallets,
    declared_info,
    decode_siwx,
    delivered_grant,
    encode_siwx,
    personal_sign_hash,
    signed_in,
    siwe_text,
    wallet_sign_in,
)
from x402srv.config.models import Secret
from x402srv.devchain import Devchain
from x402srv.settlement.chain import ChainReader
from x402srv.settlement.contract_signatures import (
    EIP6492_SUFFIX,
    _eth_call,  # the node's wording of a failed call, classified
    contract_signature_valid,
)
from x402srv.testing.buyers import paying_client
from x402srv.testing.servers import ServerProcess

KEY_PREFIX = "siwx:"


@pytest.fixture(scope="module")
def pair(
    start_seller: Callable[..., Seller],
    redis_url: str,
    echo_upstream: AppProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Seller, ServerProcess]]:
    """Two instances on one Redis and one public URL, each with the gateway route ``/api``."""
    routes = [{"prefix": "/api", "upstream": echo_upstream.url, "plans": ["hourly"]}]
    store = {"backend": "redis", "url": redis_url, "redis": {"key_prefix": KEY_PREFIX}}
    first = start_seller("gas-wallet", real_card_url=True, store=store, routes=routes)
    config = json.loads(json.dumps(first.config))  # agent_url: the first's, for both
    second = ServerProcess(config, tmp_path_factory.mktemp("siwx-second"), env=first.server.env)
    second.start()
    yield first, second
    second.stop()


def test_siwx_every_402_declares_it_as_the_sdk_server_does(
    pair: tuple[Seller, ServerProcess],
) -> None:
    first, _ = pair
    url = first.access_url
    for body in ({}, {"planId": "hourly"}):
        answer = httpx.post(url, json=body)
        assert answer.status_code == 402
        declared = decode_header(answer.headers["payment-required"])["extensions"]
        siwx = declared[SIGN_IN_WITH_X]
        assert siwx == answer.json()["extensions"][SIGN_IN_WITH_X]
        info = siwx["info"]
        assert set(info) == {
            "domain",
            "uri",
            "version",
            "nonce",
            "issuedAt",
            "resources",
            "expirationTime",
        }
        assert info["domain"] == httpx.URL(url).netloc.decode()
        assert info["uri"] == url and info["resources"] == [url]
        assert info["version"] == "1"
        assert siwx["supportedChains"] == [
            {"chainId": f"eip155:{first.chain.chain_id}", "type": "eip191"}
        ]
        assert siwx["schema"] == build_siwx_schema()
    gateway = httpx.get(f"{first.server.url}/api/x")
    assert gateway.status_code == 402
    info = decode_header(gateway.headers["payment-required"])["extensions"][SIGN_IN_WITH_X]
    assert info["info"]["uri"] == f"{first.server.url}/api/x"


async def test_siwx_a_grant_bought_at_one_instance_is_signed_in_at_the_other(
    pair: tuple[Seller, ServerProcess], buyer: LocalAccount
) -> None:
    """/x402/access and the gateway at the second instance, for a purchase at the first."""
    first, second = pair
    grant = await bought(first, buyer)
    balance = first.balance()
    public = first.config["seller"]["agent_url"]
    answer = httpx.post(second.access_url, json={"planId": "hourly"})
    assert declared_info(answer)["uri"] == f"{public}/x402/access"  # the public URL, not its own
    header = await signed_in(answer, buyer, first.access_url)
    again = send(second.access_url, header)
    assert again.status_code == 200, again.text
    assert again.json() == grant  # the same grant, as a repeat delivery
    # The gateway: the second forwards with the grant's token, which it accepts later too.
    route = f"{second.url}/api/forecast"
    offer = httpx.get(route)
    assert offer.status_code == 402
    assert declared_info(offer)["uri"] == f"{public}/api/forecast"
    through = httpx.get(
        route, headers={"SIGN-IN-WITH-X": await signed_in(offer, buyer, f"{public}/api/forecast")}
    )
    assert through.status_code == 200, through.text
    assert through.headers["x-x402-access-token"] == grant["accessToken"]
    assert through.json()["path"] == "/api/forecast"
    bearer = httpx.get(route, headers={"Authorization": f"Bearer {grant['accessToken']}"})
    assert bearer.status_code == 200, bearer.text
    assert first.balance() == balance  # nothing paid


async def test_siwx_one_message_sent_to_both_instances_at_once_is_used_once(
    pair: tuple[Seller, ServerProcess], buyer: LocalAccount
) -> None:
    first, second = pair
    grant = await bought(first, buyer)
    header = await signed_in(
        httpx.post(first.access_url, json={"planId": "hourly"}), buyer, first.access_url
    )
    async with httpx.AsyncClient(timeout=30) as http:
        racing = await asyncio.gather(
            *(
                http.post(url, json={"planId": "hourly"}, headers={"SIGN-IN-WITH-X": header})
                for url in [first.access_url, second.access_url] * 4
            )
        )
    statuses = sorted(answer.status_code for answer in racing)
    assert statuses == [200] + [409] * 7, statuses
    assert next(a for a in racing if a.status_code == 200).json() == grant


async def test_siwx_a_wallet_without_a_grant_gets_the_402_and_can_pay(
    pair: tuple[Seller, ServerProcess], buyer: LocalAccount
) -> None:
    first, _ = pair
    answer = httpx.post(first.access_url, json={"planId": "hourly"})
    header = await signed_in(answer, buyer, first.access_url)
    again = httpx.post(
        first.access_url, json={"planId": "hourly"}, headers={"SIGN-IN-WITH-X": header}
    )
    assert again.status_code == 402, again.text
    assert SIGN_IN_WITH_X in again.json()["extensions"]


# ---------------------------------------------------------------- attacks (named regressions)


async def bought(seller: Seller, buyer: LocalAccount) -> dict[str, Any]:
    http, _ = paying_client(buyer)
    async with http:
        answer = await http.post(seller.access_url, json={"planId": "hourly"})
    assert answer.status_code == 200, answer.text
    grant: dict[str, Any] = answer.json()
    return grant


def send(url: str, header: str, plan_id: str = "hourly") -> httpx.Response:
    return httpx.post(url, json={"planId": plan_id}, headers={"SIGN-IN-WITH-X": header})


async def test_siwx_attack_replaying_a_used_sign_in_is_409_and_two_racing_get_one_grant(
    pair: tuple[Seller, ServerProcess], buyer: LocalAccount
) -> None:
    first, _ = pair
    grant = await bought(first, buyer)
    header = await signed_in(
        httpx.post(first.access_url, json={"planId": "hourly"}), buyer, first.access_url
    )
    async with httpx.AsyncClient(timeout=30) as http:
        racing = await asyncio.gather(
            *(
                http.post(
                    first.access_url,
                    json={"planId": "hourly"},
                    headers={"SIGN-IN-WITH-X": header},
                )
                for _ in range(8)
            )
        )
    statuses = sorted(answer.status_code for answer in racing)
    assert statuses == [200] + [409] * 7, statuses
    assert next(a for a in racing if a.status_code == 200).json() == grant
    assert {a.json()["code"] for a in racing if a.status_code == 409} == {"SIWX_NONCE_USED"}
    assert send(first.access_url, header).json()["code"] == "SIWX_NONCE_USED"


async def test_siwx_attack_a_sign_in_for_one_plan_opens_no_other(
    pair: tuple[Seller, ServerProcess], buyer: LocalAccount
) -> None:
    """Declared for daily (which the wallet does not hold), sent for hourly (which it does)."""
    first, _ = pair
    await bought(first, buyer)
    daily = httpx.post(first.access_url, json={"planId": "daily"})
    header = await signed_in(daily, buyer, first.access_url)
    refused = send(first.access_url, header, "hourly")
    assert refused.status_code == 403 and refused.json()["code"] == "SIWX_REJECTED"
    assert "another plan" in refused.json()["detail"]
    # The gateway's route is another scope too.
    through = httpx.get(f"{first.server.url}/api/x", headers={"SIGN-IN-WITH-X": header})
    assert through.status_code == 403


async def test_siwx_attack_a_sign_in_for_another_seller_is_refused(
    pair: tuple[Seller, ServerProcess], buyer: LocalAccount
) -> None:
    """A message for another origin (here the second's own address) opens nothing at this one."""
    first, second = pair
    await bought(first, buyer)
    info = declared_info(httpx.post(first.access_url, json={"planId": "hourly"}))
    elsewhere = {**info, "domain": httpx.URL(second.url).netloc.decode()}
    elsewhere["uri"] = second.access_url
    elsewhere["resources"] = [second.access_url]
    header = encode_siwx_header(await create_siwx_payload(elsewhere, buyer, second.access_url))
    for url in (first.access_url, second.access_url):
        refused = send(url, header)
        assert refused.status_code == 403 and refused.json()["code"] == "SIWX_REJECTED"
        assert "not declared by" in refused.json()["detail"]


async def test_siwx_attack_an_expired_or_forged_sign_in_is_refused_and_uses_nothing(
    pair: tuple[Seller, ServerProcess], buyer: LocalAccount
) -> None:
    first, _ = pair
    await bought(first, buyer)
    answer = httpx.post(first.access_url, json={"planId": "hourly"})
    old = {
        **declared_info(answer),
        "issuedAt": "2020-01-01T00:00:00.000Z",
        "expirationTime": "2020-01-01T00:05:00.000Z",
    }
    expired = encode_siwx_header(await create_siwx_payload(old, buyer, first.access_url))
    assert send(first.access_url, expired).json()["code"] == "SIWX_REJECTED"
    # Another wallet's signature on this wallet's message: refused, and the nonce unused.
    header = await signed_in(answer, buyer, first.access_url)
    document = decode_siwx(header)
    thief = LocalAccountFactory.create()
    forged = dict(document, signature=await sign_evm_message(siwe_text(document), thief))
    refused = send(first.access_url, encode_siwx(forged))
    assert refused.status_code == 403 and refused.json()["code"] == "SIWX_REJECTED"
    assert send(first.access_url, header).status_code == 200  # the real one still works
    for junk in ("not base64!", base64.b64encode(b"[1]").decode(), "e30="):
        bad = send(first.access_url, junk)
        assert bad.status_code == 400 and bad.json()["code"] == "SIWX_INVALID", bad.text


# ---------------------------------------------------------------- contract wallets


@pytest.fixture(scope="module")
def wallets(devchain: Devchain) -> SmartWallets:
    return SmartWallets(devchain)


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    """The instances' Redis store, opened by the test to give a contract wallet its grant."""
    opened = RedisStore(Secret(redis_url), RedisOptions(key_prefix=KEY_PREFIX))
    await opened.start()
    yield opened
    await opened.close()


async def test_siwx_an_erc1271_wallet_signs_in_through_the_rpc(
    pair: tuple[Seller, ServerProcess],
    wallets: SmartWallets,
    store: RedisStore,
    devchain: Devchain,
) -> None:
    """A deployed wallet owned by an EOA: its owner's signature is the wallet's (eth_call)."""
    first, second = pair
    owner, stranger = devchain.new_account(eth=0), devchain.new_account(eth=0)
    wallet = wallets.deployed(owner)
    grant = await delivered_grant(store, payer=wallet, network=devchain.network)
    answer = httpx.post(second.access_url, json={"planId": "hourly"})
    forged = await wallet_sign_in(answer, first.access_url, wallet, stranger)
    refused = send(second.access_url, forged)
    assert refused.status_code == 403 and refused.json()["code"] == "SIWX_REJECTED", refused.text
    # The owner's own signature is no EOA sign-in for the wallet's address (ecrecover alone
    # finds the owner); the wallet's isValidSignature, asked through the RPC, says yes.
    header = await wallet_sign_in(answer, first.access_url, wallet, owner)
    signed = send(second.access_url, header)
    assert signed.status_code == 200, signed.text
    assert signed.json() == grant
    assert send(first.access_url, header).json()["code"] == "SIWX_NONCE_USED"


async def test_siwx_an_undeployed_wallet_signs_in_with_erc6492(
    pair: tuple[Seller, ServerProcess],
    wallets: SmartWallets,
    store: RedisStore,
    devchain: Devchain,
) -> None:
    """A counterfactual wallet: the validator deploys it inside one eth_call, nothing on-chain."""
    first, _ = pair
    owner, stranger = devchain.new_account(eth=0), devchain.new_account(eth=0)
    wallet, salt = wallets.counterfactual(owner)
    grant = await delivered_grant(store, payer=wallet, network=devchain.network)
    answer = httpx.post(first.access_url, json={"planId": "hourly"})

    def wrapped(signature: bytes) -> bytes:
        return wallets.wrap_6492(owner.address, salt, signature)

    for thief in (stranger, LocalAccountFactory.create()):
        forged = await wallet_sign_in(answer, first.access_url, wallet, thief, wrapped)
        refused = send(first.access_url, forged)
        assert refused.status_code == 403, refused.text
    # A stranger's factory data: deploys the stranger's wallet elsewhere, not this one.
    theirs = await wallet_sign_in(
        answer,
        first.access_url,
        wallet,
        stranger,
        lambda signature: wallets.wrap_6492(stranger.address, salt, signature),
    )
    assert send(first.access_url, theirs).status_code == 403
    junk = decode_siwx(theirs)
    junk["signature"] = "0x" + (b"\x01" * 40 + EIP6492_SUFFIX).hex()  # the validator reverts
    assert send(first.access_url, encode_siwx(junk)).status_code == 403
    header = await wallet_sign_in(answer, first.access_url, wallet, owner, wrapped)
    signed = send(first.access_url, header)
    assert signed.status_code == 200, signed.text
    assert signed.json() == grant
    assert not wallets.has_code(wallet)  # checked in a call: still not deployed
    # Deployed later, its 6492 signatures still count (the wallet is asked directly).
    wallets.devchain.rpc.send_transaction(
        wallets.deployer, to=wallets.factory, data=wallets.deploy_call(owner.address, salt)
    )
    answer = httpx.post(first.access_url, json={"planId": "hourly"})
    later = await wallet_sign_in(answer, first.access_url, wallet, owner, wrapped)
    assert send(first.access_url, later).status_code == 200


async def test_siwx_a_contract_signature_costing_more_than_the_gas_cap_is_not_valid(
    wallets: SmartWallets, devchain: Devchain
) -> None:
    """Out of gas is "not valid" (403), never "the RPC did not answer" (503) nor "valid"."""
    owner = devchain.new_account(eth=0)
    wallet, salt = wallets.counterfactual(owner)
    digest = keccak(b"a message")
    wrapped = wallets.wrap_6492(owner.address, salt, personal_sign_hash(owner, digest))
    chain = ChainReader(devchain.rpc_url)
    await chain.open()
    try:
        assert await contract_signature_valid(chain, wallet, digest, wrapped)
        # Enough to start the validator, not to deploy the wallet inside it.
        assert not await contract_signature_valid(chain, wallet, digest, wrapped, gas_cap=150_000)
        # A call that runs out of the cap at its top level, in the node's own words.
        deploying = {
            "to": wallets.factory,
            "data": "0x" + wallets.deploy_call(owner.address, salt).hex(),
        }
        assert await _eth_call(chain, deploying, 60_000) is None
        assert not wallets.has_code(wallet)
    finally:
        await chain.close()
