"""The admin API against a real seller: purchases by the official client, found and acted on.

Every answer is JSON; every refusal a problem document with a stable code;
lists page with a cursor. The buyers' tokens never open it, and with its own
listener the public port does not even show it exists.
"""

from __future__ import annotations

import time
import uuid

import httpx
import jwt
from eth_account.signers.local import LocalAccount

from tests.support.console import ADMIN_TOKEN, Console
from tests.support.problems import assert_problem
from tests.support.purchase import buy
from x402srv.testing.buyers import paying_client


async def test_a_purchase_is_found_every_way(console: Console, buyer: LocalAccount) -> None:
    grant = await buy(console.seller, buyer)
    challenge_id, request_id, tx_hash = grant["challengeId"], grant["requestId"], grant["txHash"]

    newest = console.ok("/purchases")["items"][0]
    assert newest["challengeId"] == challenge_id
    assert newest["state"] == "DELIVERED"
    assert newest["payer"].lower() == buyer.address.lower()
    assert newest["txHash"] == tx_hash
    assert newest["amount"] == "100000" and newest["planId"] == "hourly"
    assert newest["settledAt"] is not None and newest["secondsLeft"] > 3000

    for query in (challenge_id, request_id, tx_hash, tx_hash.upper().replace("0X", "0x")):
        found = console.ok("/purchases", q=query)["items"]
        assert [item["challengeId"] for item in found] == [challenge_id], query
    by_payer = console.ok("/purchases", q=buyer.address.lower())["items"]
    assert [item["challengeId"] for item in by_payer] == [challenge_id]
    assert console.ok("/purchases", q="0x" + "00" * 20)["items"] == []

    detail = console.ok(f"/purchases/{challenge_id}")
    assert detail["history"][0]["state"] == "PENDING"
    assert detail["history"][-1]["state"] == "DELIVERED"
    assert detail["grant"]["accessToken"] == "<redacted>"
    assert grant["accessToken"] not in str(detail)
    assert detail["payment"]["payer"].lower() == buyer.address.lower()
    assert "signature" not in detail["payment"]


async def test_a_discovery_first_purchase_is_a_purchase_too(
    console: Console, buyer: LocalAccount
) -> None:
    http, _ = paying_client(buyer)
    async with http:
        paid = await http.post(console.seller.access_url, json={})
    assert paid.status_code == 200, paid.text
    mine = console.ok("/purchases", q=buyer.address)["items"]
    assert [item["challengeId"] for item in mine] == [paid.json()["challengeId"]]
    assert mine[0]["implicit"] is True


def test_bad_searches_are_problems(console: Console) -> None:
    assert_problem(console.get("/purchases", q="robert'); drop table"), 400, "INVALID_REQUEST")
    assert_problem(console.get("/purchases", state="PAYED"), 400, "INVALID_REQUEST")
    assert_problem(console.get("/purchases", limit="0"), 400, "INVALID_REQUEST")
    assert_problem(console.get("/purchases", cursor="%%%"), 400, "INVALID_REQUEST")
    assert_problem(console.get(f"/purchases/{uuid.uuid4()}"), 404, "NOT_FOUND")
    assert_problem(console.get("/revenue", bucket="week"), 400, "INVALID_REQUEST")
    assert_problem(console.get("/revenue", **{"from": "yesterday"}), 400, "INVALID_REQUEST")
    assert_problem(
        console.get("/revenue", bucket="hour", **{"from": "2020-01-01"}), 400, "INVALID_REQUEST"
    )


async def test_lists_page_back_with_a_cursor(console: Console) -> None:
    for _ in range(5):
        console.seller.challenge("daily")
    first = console.ok("/challenges", state="PENDING", limit=2)
    second = console.ok("/challenges", state="PENDING", limit=2, cursor=first["nextCursor"])
    assert len(first["items"]) == len(second["items"]) == 2
    seen = [item["challengeId"] for item in first["items"] + second["items"]]
    assert len(set(seen)) == 4
    assert first["items"][0]["updatedAt"] >= second["items"][-1]["updatedAt"]
    assert all(item["state"] == "PENDING" and item["cancellable"] for item in first["items"])


def test_cancel_a_challenge(console: Console) -> None:
    offer = console.seller.challenge("hourly")
    challenge_id = offer["challengeId"]
    cancelled = console.post(f"/challenges/{challenge_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "CANCELLED" and cancelled.json()["cancelledNow"]
    again = console.post(f"/challenges/{challenge_id}/cancel")
    assert again.status_code == 200 and again.json()["cancelledNow"] is False
    history = console.ok(f"/purchases/{challenge_id}")["history"]
    assert history[-1] == {
        "state": "CANCELLED",
        "at": history[-1]["at"],
        "reason": "cancelled by token",
    }
    replay = httpx.post(
        console.seller.access_url, json={"planId": "hourly", "requestId": offer["requestId"]}
    )
    assert_problem(replay, 410, "CHALLENGE_EXPIRED")
    assert_problem(console.post(f"/challenges/{uuid.uuid4()}/cancel"), 404, "NOT_FOUND")


async def test_a_delivered_purchase_cannot_be_cancelled(
    console: Console, buyer: LocalAccount
) -> None:
    grant = await buy(console.seller, buyer)
    refused = console.post(f"/challenges/{grant['challengeId']}/cancel")
    assert_problem(refused, 409, "STATE_CONFLICT")


async def test_revenue_and_funnel_count_what_happened(
    console: Console, buyer: LocalAccount
) -> None:
    before = console.ok("/overview")
    await buy(console.seller, buyer, "daily")
    for _ in range(3):
        console.seller.discovery()
    after = console.ok("/overview")

    def total(page: dict[str, object], plan: str) -> tuple[int, int]:
        rows = [t for t in page["revenue"]["totals"] if t["planId"] == plan]  # type: ignore[index]
        return (sum(r["count"] for r in rows), sum(int(r["amount"]) for r in rows))

    count, amount = total(after, "daily")
    count_before, amount_before = total(before, "daily")
    assert (count - count_before, amount - amount_before) == (1, 1_500_000)
    daily = next(t for t in after["revenue"]["totals"] if t["planId"] == "daily")
    assert daily["usd"] is not None and daily["network"].startswith("eip155:")

    def stage(page: dict[str, object], name: str) -> int:
        stages = page["funnel"]["stages"]  # type: ignore[index]
        return int(next(s["count"] for s in stages if s["stage"] == name))

    assert stage(after, "unpaid") - stage(before, "unpaid") >= 4  # 3 probes + the 402
    for name in ("challenges", "tried", "settled", "delivered"):
        assert stage(after, name) - stage(before, name) >= 1, name
    assert after["settlers"]["strategy"] == "gas-wallet"
    assert after["settlers"]["ready"] is True
    calls = after["settlers"]["last24Hours"][0]
    assert calls["name"] == "gas-wallet" and calls["outcomes"]["settled"] >= 1
    assert calls["meanMs"] > 0


async def test_the_funnel_counts_failure_reasons(console: Console, buyer: LocalAccount) -> None:
    from x402srv.testing.buyers import encode_payment, signed_payment

    offer = console.seller.challenge("hourly")
    before = {f["reason"]: f["count"] for f in console.ok("/funnel")["failures"]}
    wrong = signed_payment(buyer, console.seller.chain.token, offer["accepts"][0], value=1)
    refused = httpx.post(
        console.seller.access_url,
        json={"planId": "hourly", "requestId": offer["requestId"]},
        headers={"PAYMENT-SIGNATURE": encode_payment(wrong)},
    )
    assert refused.status_code == 402
    reason = refused.json()["reason"]
    after = {f["reason"]: f["count"] for f in console.ok("/funnel")["failures"]}
    assert after.get(reason, 0) - before.get(reason, 0) == 1


def test_reconciler_and_settlers(console: Console) -> None:
    status = console.ok("/reconciler")
    assert status["enabled"] is True and status["intervalSeconds"] == 30
    assert isinstance(status["unresolved"], list)
    settlers = console.ok("/settlers")
    assert settlers["checks"] == {"store": "ok", "chain": "ok", "settlement": "ok"}
    assert settlers["settlers"], "each settler as /readyz lists it"
    assert all(entry["check"] == "ok" for entry in settlers["settlers"])


async def test_only_the_admin_credential_opens_it(console: Console, buyer: LocalAccount) -> None:
    grant = await buy(console.seller, buyer)
    for token in (grant["accessToken"], ADMIN_TOKEN + "x", ADMIN_TOKEN[:-1], "x", "Bearer"):
        refused = console.get("/purchases", token=token)
        problem = assert_problem(refused, 401, "ADMIN_UNAUTHORIZED")
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert ADMIN_TOKEN not in refused.text and problem["status"] == 401
    assert_problem(httpx.get(f"{console.url}/api/purchases"), 401, "ADMIN_UNAUTHORIZED")
    basic = httpx.get(f"{console.url}/api/purchases", auth=("admin", ADMIN_TOKEN))
    assert_problem(basic, 401, "ADMIN_UNAUTHORIZED")
    # An HS256 JWT signed with the admin token is not a credential either: only [admin] ones.
    forged = jwt.encode({"exp": time.time() + 60}, ADMIN_TOKEN, algorithm="HS256")
    assert_problem(console.get("/purchases", token=forged), 401, "ADMIN_UNAUTHORIZED")


def test_the_public_port_does_not_show_the_console(console: Console) -> None:
    public = console.seller.server.url
    for path in ("/admin/api/purchases", "/admin/api/overview", "/admin"):
        answer = httpx.get(f"{public}{path}", headers=console.headers())
        assert_problem(answer, 404, "NOT_FOUND")
    cancel = httpx.post(f"{public}/admin/api/challenges/x/cancel", headers=console.headers())
    assert_problem(cancel, 404, "NOT_FOUND")


async def test_on_the_public_port_under_its_prefix(
    console_inline: Console, buyer: LocalAccount
) -> None:
    grant = await buy(console_inline.seller, buyer)
    found = console_inline.ok("/purchases", q=grant["txHash"])["items"]
    assert [item["challengeId"] for item in found] == [grant["challengeId"]]
    assert_problem(
        httpx.get(f"{console_inline.seller.server.url}/admin/api/purchases"), 404, "NOT_FOUND"
    )
