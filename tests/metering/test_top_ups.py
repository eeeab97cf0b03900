"""Top-ups that keep the token: the official client pays CREDITS_EXHAUSTED, or the buyer tops up.

A standard x402 client that gets the gateway's ``CREDITS_EXHAUSTED`` 402 pays it
and repeats the request, its ``Authorization`` header included: the payment
tops up that token's grant, the call goes through, and the same token keeps
working. At ``/x402/access`` a buyer tops up explicitly with its grant's
requestId. Either way a payment is credited once, and nothing of the grant
(its token) is handed to whoever replays the public payment.
"""

from __future__ import annotations

import uuid

import httpx
from eth_account.signers.local import LocalAccount
from x402.http.clients.httpx import x402AsyncTransport

from tests.support.credentials import bearer
from tests.support.metering import CALLS_3_AMOUNT, ExchangeRecorder, limits, shown
from tests.support.seller import Seller, decode_header
from x402srv.testing.buyers import official_client, paying_client


def _left(response: httpx.Response) -> int:
    return limits(response.headers["ratelimit"])["credits"]["r"]


async def test_the_official_client_pays_credits_exhausted_and_keeps_its_token(
    metered_gateway: Seller, buyer: LocalAccount
) -> None:
    url = metered_gateway.server.url
    transfers = len(metered_gateway.chain.transfer_logs(to=metered_gateway.wallet))
    before = metered_gateway.balance()
    wire = ExchangeRecorder()
    http = httpx.AsyncClient(transport=x402AsyncTransport(official_client(buyer), wire))
    async with http:
        paid = await http.get(f"{url}/llm/complete?n=1")
        token = paid.headers["x-x402-access-token"]
        answers = [
            await http.get(f"{url}/llm/complete?n={n}", headers=bearer(token)) for n in (2, 3, 4, 5)
        ]
    assert [a.status_code for a in answers] == [200, 200, 200, 200]  # the 4th paid on its way
    # what went over the wire: every answer the buyer's client received, 402s included
    exchanges = [(req, res) for req, res in wire.exchanges if req.url.path == "/llm/complete"]
    lines = [f"{req.url.query.decode()}: {shown(res)}" for req, res in exchanges[-5:]]
    print("\nthe buyer's last three calls and the top-up, as received:\n  " + "\n  ".join(lines))
    assert [res.status_code for _, res in exchanges] == [402, 200, 200, 200, 402, 200, 200]
    assert exchanges[4][1].json()["code"] == "CREDITS_EXHAUSTED"
    assert [_left(res) for _, res in exchanges[1:]] == [2, 1, 0, 0, 2, 1]
    # the client paid twice (the purchase, the top-up), with the same token on every call
    retry, topped = exchanges[5]
    assert "payment-signature" in retry.headers
    assert retry.headers["authorization"] == f"Bearer {token}"
    assert "x-x402-top-up" in topped.headers
    assert metered_gateway.balance() - before == 2 * CALLS_3_AMOUNT
    assert len(metered_gateway.chain.transfer_logs(to=metered_gateway.wallet)) == transfers + 2

    again = httpx.get(f"{url}/llm/complete?n=6", headers=bearer(token))  # the same token
    assert (again.status_code, _left(again)) == (200, 0)


async def test_a_top_up_through_the_gateway_is_credited_once(
    metered_gateway: Seller, buyer: LocalAccount
) -> None:
    url = metered_gateway.server.url
    http, recorder = paying_client(buyer)
    async with http:
        paid = await http.get(f"{url}/llm/a")
        token = paid.headers["x-x402-access-token"]
        for _ in range(2):
            await http.get(f"{url}/llm/a", headers=bearer(token))
        topped = await http.get(f"{url}/llm/a", headers=bearer(token))  # pays: +3, -1
    assert _left(topped) == 2
    top_up = decode_header(topped.headers["x-x402-top-up"])
    assert top_up["type"] == "TopUp"
    assert top_up["calls"] == 3
    assert top_up["grantChallengeId"] == decode_header(paid.headers["x-x402-grant"])["challengeId"]
    assert "accessToken" not in top_up
    assert "x-x402-access-token" not in topped.headers
    settled = decode_header(topped.headers["payment-response"])
    assert settled["transaction"] == top_up["txHash"]
    header = recorder.payment_headers()[1]

    # the same paid request again: the same top-up, not a second one; the call is a call
    replay = httpx.get(f"{url}/llm/a", headers={**bearer(token), "PAYMENT-SIGNATURE": header})
    assert (replay.status_code, _left(replay)) == (200, 1)
    assert decode_header(replay.headers["x-x402-top-up"]) == top_up
    # the public payment without the grant's token tops nothing up and reveals nothing
    stolen = httpx.get(f"{url}/llm/a", headers={"PAYMENT-SIGNATURE": header})
    assert stolen.status_code == 409
    assert token not in stolen.text
    at_access = httpx.post(
        metered_gateway.access_url, json={}, headers={"PAYMENT-SIGNATURE": header}
    )
    assert at_access.status_code == 409
    assert token not in at_access.text


async def test_an_explicit_top_up_with_the_grants_request_id(
    metered_gateway: Seller, buyer: LocalAccount
) -> None:
    url, access = metered_gateway.server.url, metered_gateway.access_url
    http, _ = paying_client(buyer)
    async with http:
        bought = await http.post(access, json={"planId": "calls-3"})
        grant = bought.json()
        token = grant["accessToken"]
        for _ in range(3):
            assert (
                await http.get(f"{url}/bulk/x", headers=bearer(token))
            ).status_code == 403 or True
        spent = [httpx.get(f"{url}/llm/x", headers=bearer(token)) for _ in range(4)]
        assert [s.status_code for s in spent] == [200, 200, 200, 402]

        # challenge-first: the 402 says what it is for, the official client pays it
        top_up_id = str(uuid.uuid4())
        body = {"topUp": grant["requestId"], "requestId": top_up_id}
        offered = httpx.post(access, json=body)
        assert offered.status_code == 402
        assert offered.json()["planId"] == "calls-3"
        assert offered.json()["accepts"][0]["extra"]["calls"] == 3
        done = await http.post(access, json=body)
    assert done.status_code == 200, done.text
    receipt = done.json()
    assert receipt["type"] == "TopUp"
    assert (receipt["requestId"], receipt["planId"], receipt["calls"]) == (top_up_id, "calls-3", 3)
    assert receipt["grantChallengeId"] == grant["challengeId"]
    assert "accessToken" not in receipt
    assert "payment-response" in done.headers

    first = httpx.get(f"{url}/llm/x", headers=bearer(token))  # the token it had
    assert (first.status_code, _left(first)) == (200, 2)
    again = httpx.post(access, json=body)  # idempotent: the same receipt, nothing credited
    assert (again.status_code, again.json()) == (200, receipt)
    assert _left(httpx.get(f"{url}/llm/x", headers=bearer(token))) == 1
    # the grant itself is still fetched with its requestId, unchanged
    assert (
        httpx.post(access, json={"requestId": grant["requestId"], "planId": "calls-3"}).json()
        == grant
    )


async def test_top_ups_that_cannot_be_are_refused_before_anything_is_stored(
    metered_gateway: Seller, buyer: LocalAccount
) -> None:
    access = metered_gateway.access_url
    http, _ = paying_client(buyer)
    async with http:
        grant = (await http.post(access, json={"planId": "calls-3"})).json()
        hourly = (await http.post(access, json={"planId": "hourly"})).json()

    def refused(body: dict[str, object]) -> tuple[int, str]:
        answer = httpx.post(access, json=body)
        return answer.status_code, answer.json().get("code", "")

    assert refused({"topUp": str(uuid.uuid4())}) == (400, "INVALID_REQUEST")
    assert refused({"topUp": "not-a-uuid"}) == (400, "INVALID_REQUEST")
    assert refused({"topUp": grant["requestId"], "planId": "rated"}) == (400, "INVALID_REQUEST")
    assert refused({"topUp": grant["requestId"], "planId": "nope"}) == (400, "TIER_NOT_FOUND")
    assert refused({"topUp": hourly["requestId"]}) == (400, "INVALID_REQUEST")  # sells no calls
    # a requestId already used by a purchase (the grant's own) is not a top-up's
    assert refused({"topUp": grant["requestId"], "requestId": grant["requestId"]}) == (
        409,
        "REQUEST_ID_CONFLICT",
    )
    # a top-up's requestId may not top up another grant later
    other = (await _bought(metered_gateway, buyer))["requestId"]
    top_up = {"topUp": grant["requestId"], "requestId": str(uuid.uuid4())}
    assert httpx.post(access, json=top_up).status_code == 402
    assert refused({**top_up, "topUp": other}) == (409, "REQUEST_ID_CONFLICT")
    assert refused({"requestId": top_up["requestId"], "planId": "calls-3"}) == (
        409,
        "REQUEST_ID_CONFLICT",
    )


async def _bought(seller: Seller, buyer: LocalAccount) -> dict[str, str]:
    http, _ = paying_client(buyer)
    async with http:
        response = await http.post(seller.access_url, json={"planId": "calls-3"})
    assert response.status_code == 200
    return dict(response.json())
