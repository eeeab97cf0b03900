"""The demo's steps, each printing what it did: chain, seller stack, purchase, use, replay.

Every claim the demo prints is checked against the real thing first: the 402 and
the payment come from the recorded wire traffic of the official client, the
settlement from the chain's receipt and Transfer log (not from x402srv's word), the
protected answer from the seller's API. A step that finds something unexpected
raises ``DemoFailed`` and the demo stops everything.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx

from x402srv.demo.buyer import buy
from x402srv.demo.show import (
    decode_header,
    describe_offer,
    describe_payment,
    json_lines,
    short,
    token_amount,
)
from x402srv.demo.stack import PLANS, ApiProcess, DemoStack
from x402srv.devchain import (
    AnvilNotFoundError,
    Devchain,
    anvil_cache_dir,
    ensure_anvil,
    find_anvil,
)
from x402srv.devchain.anvil import ANVIL_NPM_PACKAGE, ANVIL_VERSION
from x402srv.testing.servers import ServerProcess

__all__ = ["Balances", "DemoFailed", "Say", "buy_plan", "call_api", "replay", "start_chain"]

Say = Callable[[str], None]

BUYER_FUNDS = 10_000_000  # 10.00 USDC
SPEND_CAP = 1_000_000  # the buyer pays at most 1.00 USDC per payment
PLAN = "hourly"


class DemoFailed(Exception):
    """Something did not behave as the demo says it does."""


def _anvil(project_dir: Path, say: Say) -> Path:
    try:
        return find_anvil(project_dir)
    except AnvilNotFoundError:
        say(
            f"   anvil is not installed yet: npm install {ANVIL_NPM_PACKAGE}@{ANVIL_VERSION}"
            f" into {anvil_cache_dir()} (first run only; your directory stays as it is)"
        )
        return ensure_anvil(project_dir)


def start_chain(stack: DemoStack, project_dir: Path, say: Say) -> Devchain:
    say("1. A local chain with a USDC-like token")
    chain = stack.start_chain(_anvil(project_dir, say), buyer_usdc_atomic=BUYER_FUNDS)
    token, accounts = chain.token, stack.accounts
    say(f"   anvil       {chain.rpc_url}  chain {chain.network}  pid {chain.anvil.pid}")
    say(f'   token       {token.address}  "{token.name}" v{token.version}, EIP-3009 like USDC')
    say(f"   buyer       {accounts.buyer.address}  {token_amount(BUYER_FUNDS)} USDC (dev #2)")
    say(f"   seller      {accounts.seller}  payTo: receives payments (dev #3)")
    say(f"   gas wallet  {accounts.gas_wallet.address}  x402srv settles with it (dev #1)")
    return chain


def describe_stack(stack: DemoStack, server: ServerProcess, api: ApiProcess, say: Say) -> None:
    say(f"\n2. The seller: x402srv and the seller's own API (files in {stack.directory})")
    pids = dict(stack.pids())
    plans = ", ".join(f"{p['plan_id']} {p['unit_amount']}" for p in PLANS)
    say(f"   x402srv     {server.url}  pid {pids['x402srv']}")
    say(f"               gas-wallet settlement, sqlite store, plans {plans}")
    say(f"   seller API  {api.url}  pid {pids['seller API']}")
    say("               GET /weather behind x402srv.guard.require_access")
    say("               (the README's seller quickstart: x402srv/demo/seller_api.py)")
    refused = httpx.get(f"{api.url}/weather")
    if refused.status_code != 401:
        raise DemoFailed(f"the seller API answered {refused.status_code} without a token")
    say(f"   -> GET /weather without a token\n   <- 401 {refused.json()['code']}")
    card = httpx.get(f"{server.url}/.well-known/agent-card.json").json()
    skills = ", ".join(skill["id"] for skill in card["skills"])
    say(f'   -> GET /.well-known/agent-card.json\n   <- 200 "{card["name"]}", skills {skills}')


def buy_plan(chain: Devchain, stack: DemoStack, server: ServerProcess, say: Say) -> dict[str, Any]:
    say(f'\n3. Buy plan "{PLAN}" with the official x402 client (challenge-first)')
    request_id = str(uuid.uuid4())
    response, exchanges = asyncio.run(
        buy(
            server.access_url,
            stack.accounts.buyer,
            plan_id=PLAN,
            request_id=request_id,
            network=chain.network,
            asset=chain.token.address,
            max_atomic=SPEND_CAP,
        )
    )
    if response.status_code != 200 or len(exchanges) != 2:
        raise DemoFailed(f"the purchase ended with {response.status_code}: {response.text}")
    challenge, paid = exchanges
    say(f"   -> POST /x402/access {challenge.request.content.decode()}")
    offer = challenge.response.json()
    required = decode_header(challenge.response.headers["payment-required"])
    say(
        f"   <- 402 Payment Required: challenge {short(offer['challengeId'], 8, 4)}, "
        f"expires {offer['expiresAt']}"
    )
    first, second = describe_offer(required["accepts"][0])
    say(f"      offer  {first}\n             {second}")
    say("   -> POST /x402/access, same body + PAYMENT-SIGNATURE: an EIP-3009 authorization")
    say("      the buyer signed off-chain (no transaction, no gas):")
    for line in describe_payment(decode_header(paid.request.headers["payment-signature"])):
        say(f"      {line}")
    grant: dict[str, Any] = response.json()
    settled = decode_header(response.headers["payment-response"])
    say("   <- 200 AccessGrant")
    say(f"      txHash     {grant['txHash']}")
    say(f"      token      {short(grant['accessToken'], 12, 6)} ({grant['tokenType']})")
    say(f"      plan       {grant['planId']}, expires {grant['expiresAt']}")
    say(f"      requestId  {grant['requestId']} (keep it: it fetches this grant again)")
    say(f"      PAYMENT-RESPONSE success={settled['success']}, payer {short(settled['payer'])}")
    _confirm_on_chain(chain, stack, grant["txHash"], say)
    return grant


def _confirm_on_chain(chain: Devchain, stack: DemoStack, tx_hash: str, say: Say) -> None:
    """Trust the chain, not the server: the receipt and the exact Transfer must be there."""
    receipt = chain.rpc.wait_for_receipt(tx_hash)
    transfers = [
        log
        for log in chain.transfer_logs(to=stack.accounts.seller, from_block=receipt.block_number)
        if log.tx_hash == tx_hash
    ]
    if receipt.status != 1 or len(transfers) != 1:
        raise DemoFailed(f"transaction {tx_hash} did not transfer to the seller")
    transfer = transfers[0]
    say(
        f"      on-chain   block {receipt.block_number}: Transfer {short(transfer.from_address)}"
        f" -> {short(transfer.to)}, {transfer.value} units"
    )


def call_api(api: ApiProcess, grant: dict[str, Any], say: Say) -> None:
    say("\n4. Call the seller's API with the token")
    token = grant["accessToken"]
    say(f"   -> GET /weather  Authorization: Bearer {short(token, 12, 6)}")
    answer = httpx.get(f"{api.url}/weather", headers={"Authorization": f"Bearer {token}"})
    if answer.status_code != 200:
        raise DemoFailed(f"the seller API refused the token: {answer.status_code} {answer.text}")
    first, *more = json_lines(answer.json())
    say(f"   <- 200 {first}")
    for line in more:
        say(f"          {line}")


def replay(server: ServerProcess, grant: dict[str, Any], say: Say) -> None:
    say("\n5. Lost the token? Ask again with the same requestId, no payment")
    body = {"planId": grant["planId"], "requestId": grant["requestId"]}
    say(f"   -> POST /x402/access {json.dumps(body)}")
    again = httpx.post(server.access_url, json=body)
    if again.status_code != 200 or again.json() != grant:
        raise DemoFailed(f"the replay answered {again.status_code}: {again.text}")
    say(f"   <- 200 the same grant (txHash {short(grant['txHash'], 10, 4)}): nothing paid twice")


@dataclass(frozen=True)
class Balances:
    buyer: int
    seller: int
    gas_wei: int

    @classmethod
    def read(cls, chain: Devchain, stack: DemoStack) -> Balances:
        accounts = stack.accounts
        return cls(
            buyer=chain.balance_of(accounts.buyer.address),
            seller=chain.balance_of(accounts.seller),
            gas_wei=chain.rpc.get_balance(accounts.gas_wallet.address),
        )

    def show(self, after: Balances, say: Say) -> None:
        say("\n6. Balances (USDC)")
        for name, old, new in (
            ("buyer ", self.buyer, after.buyer),
            ("seller", self.seller, after.seller),
        ):
            change = ("+" if new >= old else "-") + token_amount(abs(new - old))
            say(f"   {name}  {token_amount(old):>6} -> {token_amount(new):>6}  ({change})")
        gas = Decimal(self.gas_wei - after.gas_wei).scaleb(-18)
        say(f"   gas: the gas wallet paid {gas:.8f} ETH, the buyer none")
