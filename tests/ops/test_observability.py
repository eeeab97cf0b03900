"""Health, request ids, structured logs without secrets, and metrics across workers."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.faults import lockable_store, locked
from tests.support.problems import assert_problem
from tests.support.seller import GAS_KEY_ENV, JWT_SECRET, Seller
from x402srv.devchain import Devchain
from x402srv.server.logs import fingerprint
from x402srv.testing.buyers import paying_client
from x402srv.testing.fixtures import FacilitatorProcess
from x402srv.testing.servers import free_port


def json_lines(seller: Seller) -> list[dict[str, Any]]:
    lines = []
    for line in seller.server.logs().splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def test_healthz_and_readyz(seller: Seller) -> None:
    health = httpx.get(f"{seller.server.url}/healthz")
    assert health.status_code == 200
    assert health.json() == {"status": "ok"}
    ready = httpx.get(f"{seller.server.url}/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json() == {
        "status": "ready",
        "checks": {"store": "ok", "chain": "ok", "settlement": "ok"},
        "settlers": [
            {
                "network": "eip155:31337",
                "settler": f"{seller.strategy} #1 on eip155:31337",
                "check": "ok",
                "breaker": None,
            }
        ],
    }


def test_readyz_when_the_facilitator_is_down(
    start_seller: Callable[..., Seller], facilitator: Callable[..., FacilitatorProcess]
) -> None:
    process = facilitator()
    # (answers are cached for readiness_cache_seconds; this test wants every check asked)
    seller = start_seller(
        "facilitator", facilitator_url=process.url, server={"readiness_cache_seconds": 0}
    )
    assert httpx.get(f"{seller.server.url}/readyz").status_code == 200
    process.stop()
    answer = httpx.get(f"{seller.server.url}/readyz")
    problem = assert_problem(answer, 503, "NOT_READY")
    assert problem["checks"]["settlement"].startswith("facilitator unreachable")
    assert problem["checks"]["store"] == "ok"
    assert process.url not in answer.text


def test_readyz_when_the_gas_wallet_runs_dry(
    start_seller: Callable[..., Seller], devchain: Devchain
) -> None:
    poor = devchain.new_account(eth=0, usdc_atomic=0)
    devchain.fund_eth(poor.address, 10**14)  # 0.0001 ETH, below the default 0.001
    seller = start_seller(
        "gas-wallet",
        settlement={"strategy": "gas-wallet", "gas_wallet_private_key": {"env": GAS_KEY_ENV}},
        env={GAS_KEY_ENV: "0x" + bytes(poor.key).hex()},
    )
    problem = assert_problem(httpx.get(f"{seller.server.url}/readyz"), 503, "NOT_READY")
    assert "below" in problem["checks"]["settlement"]
    assert int(httpx.get(f"{seller.server.url}/readyz").headers["retry-after"]) >= 1


async def test_request_ids_and_transition_lines(seller: Seller, buyer: LocalAccount) -> None:
    mine = httpx.post(seller.access_url, json={}, headers={"X-Request-Id": "trace-abc.123"})
    assert mine.headers["x-request-id"] == "trace-abc.123"
    odd = httpx.post(seller.access_url, json={}, headers={"X-Request-Id": "bad id\twith spaces"})
    assert re.fullmatch(r"[0-9a-f]{32}", odd.headers["x-request-id"])
    assert re.fullmatch(
        r"[0-9a-f]{32}", httpx.get(f"{seller.server.url}/nope").headers["x-request-id"]
    )

    http, _ = paying_client(buyer)
    async with http:
        paid = await http.post(
            seller.access_url, json={"planId": "hourly"}, headers={"X-Request-Id": "purchase-77"}
        )
    assert paid.status_code == 200
    grant = paid.json()
    lines = [
        line for line in json_lines(seller) if line.get("challenge_id") == grant["challengeId"]
    ]
    moves = [(line.get("from_state"), line["to_state"]) for line in lines]
    # An unpaid request's new challenge is logged at DEBUG only (anyone can send
    # them); the purchase's INFO lines start with the payment.
    assert (None, "PENDING") not in moves
    assert moves[0] == ("PENDING", "SETTLING")
    assert ("SETTLING", "PAID") in moves
    assert moves[-1] == ("PAID", "DELIVERED")
    # The requestId fetches the grant: lines show its fingerprint, never the id.
    assert all(line["request_fp"] == fingerprint(grant["requestId"]) for line in lines)
    assert all(grant["requestId"] not in json.dumps(line) for line in lines)
    assert {line["http_request_id"] for line in lines} == {"purchase-77"}
    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(line)


def test_a_full_run_logs_no_secrets(
    start_seller: Callable[..., Seller], buyer: LocalAccount
) -> None:
    """Purchase, replays, failures, a bad token at a gateway route: grep the log for secrets."""
    seller = start_seller(
        "gas-wallet",
        routes=[{"prefix": "/api", "upstream": f"http://127.0.0.1:{free_port()}"}],
    )
    payment = seller.pay_with(buyer, "hourly")
    header = payment.header
    paid = httpx.post(
        seller.access_url, json={"planId": "hourly"}, headers={"PAYMENT-SIGNATURE": header}
    )
    assert paid.status_code == 200
    httpx.post(seller.access_url, json={"planId": "hourly"}, headers={"PAYMENT-SIGNATURE": header})
    httpx.post(
        seller.access_url, json={"planId": "hourly"}, headers={"PAYMENT-SIGNATURE": header[:-20]}
    )
    token = paid.json()["accessToken"]
    httpx.get(f"{seller.server.url}/api/x", headers={"Authorization": f"Bearer {token}x"})
    httpx.get(f"{seller.server.url}/api/x", headers={"Authorization": f"Bearer {token}"})
    logs = seller.server.logs()
    assert "challenge" in logs  # the log is not empty
    secrets = {
        "jwt secret": JWT_SECRET,
        "gas wallet key": seller.server.env[GAS_KEY_ENV][2:],
        "access token": token,
        "token signature": token.rsplit(".", 1)[1],
        "payment signature": payment.document["payload"]["signature"][2:],
        "payment header": header[:60],
        "requestId": payment.request_id,
    }
    for name, secret in secrets.items():
        assert secret not in logs, f"{name} found in the server log"
        assert secret.lower() not in logs.lower(), f"{name} found in the server log"


@pytest.fixture(scope="module")
def metered_seller(start_seller: Callable[..., Seller]) -> Seller:
    return start_seller(
        "gas-wallet",
        workers=2,
        metrics={"enabled": True},
        store=lockable_store(),
        routes=[{"prefix": "/api", "upstream": f"http://127.0.0.1:{free_port()}"}],
    )


def scrape(seller: Seller) -> dict[str, float]:
    text = httpx.get(f"{seller.server.url}/metrics").text
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


async def test_metrics_add_up_across_workers(metered_seller: Seller, devchain: Devchain) -> None:
    seller = metered_seller
    before = scrape(seller)
    buyers = [devchain.new_account() for _ in range(4)]
    for buyer in buyers:
        http, _ = paying_client(buyer)
        async with http:
            assert (
                await http.post(seller.access_url, json={"planId": "hourly"})
            ).status_code == 200
    for _ in range(3):
        httpx.get(f"{seller.server.url}/api/x", headers={"Authorization": "Bearer nope"})
    with locked(seller.server.directory / "x402srv.db"):
        assert httpx.post(seller.access_url, json={"planId": "daily"}).status_code == 503
    # several scrapes: whichever worker answers, the totals are the same
    totals = [scrape(seller) for _ in range(4)]
    assert all(t == totals[0] for t in totals[1:])
    after = totals[0]

    def grew(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert grew("x402srv_challenges_created_total") == 4
    assert grew('x402srv_settlements_total{outcome="settled",strategy="gas-wallet"}') == 4
    assert grew('x402srv_settlement_seconds_count{strategy="gas-wallet"}') == 4
    assert grew("x402srv_grants_issued_total") == 4
    assert grew('x402srv_token_rejections_total{code="INVALID_TOKEN"}') == 3
    assert grew("x402srv_store_errors_total") == 1
    assert JWT_SECRET not in httpx.get(f"{seller.server.url}/metrics").text
