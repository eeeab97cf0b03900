"""sign-in-with-x (docs/sign-in-with-x.md) with the official Python client, on two instances.

Two x402srv instances share one Redis; each says its own URL in its card (so the
official client, which checks that a 402's domain is the one it asked, signs
in at either). A buyer pays at the first; a fresh process holding only the
wallet key (``docs/samples/siwx_buyer.py``, the SDK's SIWX client extension)
gets the same grant at the second, over /x402/access and through the gateway,
without paying. The named attacks are in ``test_siwx_attacks.py``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account as LocalAccountFactory
from eth_account.signers.local import LocalAccount
from x402.extensions.sign_in_with_x import (
    SIGN_IN_WITH_X,
    SIWxPayload,
    build_siwx_schema,
    create_siwx_message,
    create_siwx_payload,
    encode_siwx_header,
    sign_evm_message,
)

from tests.support.apps import AppProcess
from tests.support.seller import Seller, decode_header
from x402srv.testing.buyers import paying_client
from x402srv.testing.servers import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "docs" / "samples" / "siwx_buyer.py"


@pytest.fixture(scope="module")
def pair(
    start_seller: Callable[..., Seller],
    redis_url: str,
    echo_upstream: AppProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Seller, ServerProcess]]:
    """Two instances on one Redis, each with the gateway route ``/api`` (plan hourly)."""
    routes = [{"prefix": "/api", "upstream": echo_upstream.url, "plans": ["hourly"]}]
    store = {"backend": "redis", "url": redis_url, "redis": {"key_prefix": "siwx:"}}
    first = start_seller("gas-wallet", real_card_url=True, store=store, routes=routes)
    config = json.loads(json.dumps(first.config))
    second = ServerProcess(config, tmp_path_factory.mktemp("siwx-second"), env=first.server.env)
    config["seller"]["agent_url"] = second.url
    second.start()
    yield first, second
    second.stop()


def fresh_buyer(key: str, seller: Seller, access_url: str, paid_url: str) -> str:
    """The sample, run as a new process that holds nothing but the wallet's key."""
    env = {
        **os.environ,
        "BUYER_KEY": key,
        "ACCESS_URL": access_url,
        "PAID_URL": paid_url,
        "PAY_TO": seller.wallet,
    }
    done = subprocess.run(
        [sys.executable, str(SAMPLE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


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


async def test_siwx_a_fresh_process_gets_the_grant_again_at_another_instance(
    pair: tuple[Seller, ServerProcess], buyer: LocalAccount, tmp_path: Path
) -> None:
    first, second = pair
    http, _ = paying_client(buyer)
    async with http:
        bought = await http.post(first.access_url, json={"planId": "hourly"})
    assert bought.status_code == 200, bought.text
    grant = bought.json()
    balance = first.balance()
    # /x402/access at the second instance; the gateway at the first, whose URL its tokens
    # name (two instances behind one public URL would share it: here each has its own).
    route = f"{first.server.url}/api/forecast"
    out = fresh_buyer("0x" + bytes(buyer.key).hex(), first, second.access_url, route)
    print(out)
    assert "sent SIGN-IN-WITH-X:" in out and "(paid)" not in out
    line = next(x for x in out.splitlines() if x.startswith("/x402/access:"))
    assert line.split(" ", 2)[1] == "200"
    assert json.loads(line.split(" ", 2)[2]) == grant  # the same grant, as a repeat delivery
    gateway = next(x for x in out.splitlines() if x.startswith(route))
    assert gateway.split()[1:] == ["200", grant["accessToken"]]
    # The TypeScript buyer (@x402/fetch with @x402/extensions' SIWX extension), too.
    shown = subprocess.run(
        [str(ROOT / "node_modules" / ".bin" / "tsx"), str(SAMPLE.with_suffix(".ts"))],
        env={
            **os.environ,
            "BUYER_KEY": "0x" + bytes(buyer.key).hex(),
            "ACCESS_URL": second.access_url,
            "PAY_TO": first.wallet,
            "TMPDIR": str(tmp_path),  # tsx leaves its cache there
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.split() == ["/x402/access:", "200", "hourly", grant["accessToken"]]
    assert first.balance() == balance  # nothing paid


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


async def signed_in(answer: httpx.Response, buyer: LocalAccount, url: str) -> str:
    """What the SDK's client sends for this 402 (its own payload builder and encoder)."""
    declared: dict[str, Any] = answer.json()["extensions"][SIGN_IN_WITH_X]
    chain = declared["supportedChains"][0]
    info = {**declared["info"], "chainId": chain["chainId"], "type": chain["type"]}
    payload = await create_siwx_payload(info, buyer, url)
    return encode_siwx_header(payload)


def siwe_text(document: dict[str, Any]) -> str:
    """The message the SDK signs for this payload (its own formatter)."""
    payload = SIWxPayload.model_validate(document)
    return create_siwx_message(payload, payload.address)


def decode_siwx(header: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(base64.b64decode(header))
    return document


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
    """The second instance says another URL: to it, a message for the first is another seller's."""
    first, second = pair
    await bought(first, buyer)
    header = await signed_in(
        httpx.post(first.access_url, json={"planId": "hourly"}), buyer, first.access_url
    )
    refused = send(second.access_url, header)
    assert refused.status_code == 403 and refused.json()["code"] == "SIWX_REJECTED"


async def test_siwx_attack_an_expired_or_forged_sign_in_is_refused_and_uses_nothing(
    pair: tuple[Seller, ServerProcess], buyer: LocalAccount
) -> None:
    first, _ = pair
    await bought(first, buyer)
    answer = httpx.post(first.access_url, json={"planId": "hourly"})
    declared = answer.json()["extensions"][SIGN_IN_WITH_X]
    chain = declared["supportedChains"][0]
    old = {
        **declared["info"],
        "chainId": chain["chainId"],
        "type": chain["type"],
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
    refused = send(first.access_url, base64.b64encode(json.dumps(forged).encode()).decode())
    assert refused.status_code == 403 and refused.json()["code"] == "SIWX_REJECTED"
    assert send(first.access_url, header).status_code == 200  # the real one still works
    for junk in ("not base64!", base64.b64encode(b"[1]").decode(), "e30="):
        bad = send(first.access_url, junk)
        assert bad.status_code == 400 and bad.json()["code"] == "SIWX_INVALID", bad.text
