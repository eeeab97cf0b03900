"""An ``AccessPipeline`` built in process on the session's anvil, every part chosen by the test.

``open_rig`` builds the config the way a seller's TOML would (``seller_config``
+ ``parse_config``), the memory (or sqlite) store inside a ``RacingStore``, a
``ScriptedSettler``, an issuer (the real ``jwt`` one unless the test brings its
own) and a real ``ChainReader`` on anvil whose JSON-RPC requests are logged
(``rig.rpc``), or no chain at all. The clock is frozen at the chain's time.
Buyers are real anvil accounts; their payments are signed EIP-3009
authorizations for the requirement the pipeline offered.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from eth_account import Account
from eth_account.signers.local import LocalAccount

from tests.support.racing import FrozenClock, RacingStore
from tests.support.scripted import ScriptedSettler
from tests.support.seller import JWT_SECRET
from x402srv.access.pipeline import AccessPipeline, AccessResult
from x402srv.access.records import ChallengeRecord, PaymentKey, State
from x402srv.config.models import Config, parse_config
from x402srv.default_plugins.jwt_issuer import build_jwt_issuer
from x402srv.default_plugins.memory_store import MemoryStore
from x402srv.default_plugins.sqlite.store import SqliteStore
from x402srv.devchain import Devchain, settle_on_chain
from x402srv.errors import ProblemError
from x402srv.interfaces import CredentialIssuer, Settler, Store
from x402srv.server.plugin_context import PluginContext
from x402srv.settlement.chain import ChainReader
from x402srv.testing.buyers import signed_payment
from x402srv.testing.servers import seller_config
from x402srv.wire.offers import AccessGranted, PaymentOffer
from x402srv.wire.protocol import AccessBody, PaymentPayload, parse_payment_payload

__all__ = ["MakeRig", "Payment", "Rig", "RpcLog", "granted", "open_rig", "outcome", "problem"]


class RpcLog(httpx.AsyncBaseTransport):
    """Sits under the ChainReader's HTTP client and keeps the method of every JSON-RPC call."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.methods: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.methods.append(str(json.loads(request.content)["method"]))
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass(frozen=True)
class Payment:
    """A signed payment: the wire dict (a PAYMENT-SIGNATURE's JSON) and its parsed form."""

    wire: dict[str, Any]
    payload: PaymentPayload

    @property
    def authorization(self) -> dict[str, str]:
        return dict(self.wire["payload"]["authorization"])

    @property
    def signature(self) -> str:
        return str(self.wire["payload"]["signature"])

    @property
    def nonce(self) -> str:
        return self.authorization["nonce"]

    @classmethod
    def of(cls, wire: dict[str, Any]) -> Payment:
        return cls(wire, parse_payment_payload(wire))


@dataclass
class Rig:
    devchain: Devchain
    config: Config
    clock: FrozenClock
    store: RacingStore
    settler: ScriptedSettler
    issuer: CredentialIssuer
    chain: ChainReader | None
    #: The reader on anvil, also when the pipeline under test has none (competitors use it).
    reader: ChainReader
    rpc: RpcLog
    pipeline: AccessPipeline
    relayer: LocalAccount
    competitors: list[AccessPipeline] = field(default_factory=list)

    @property
    def wallet(self) -> str:
        return self.config.seller.wallet_address

    def competitor(
        self,
        *,
        settler: Settler | None = None,
        issuer: CredentialIssuer | None = None,
        clock: FrozenClock | None = None,
        chain: bool = True,
    ) -> AccessPipeline:
        """Another worker (or the reconciler's pipeline) on the same records.

        It works on the inner store, so its moves are the competing ones and never
        trigger the armed races themselves. Same issuer and clock unless given; it
        reads the real chain unless ``chain=False``.
        """
        pipeline = AccessPipeline(
            self.config,
            store=self.store.inner,
            settler=settler or ScriptedSettler(),
            issuer=issuer or self.issuer,
            chain=self.reader if chain else None,
            clock=clock or self.clock,
        )
        self.competitors.append(pipeline)
        return pipeline

    async def reconciled(self, challenge_id: str) -> ChallengeRecord:
        """What a reconciler pass in another worker does to one record: resolve, deliver."""
        reconciler = self.competitor()
        after = await reconciler.resolve(await self.record(challenge_id))
        if after.state is State.PAID:
            after = await reconciler.deliver(after, wait=False)
        return after

    async def challenge(self, plan_id: str = "hourly") -> dict[str, Any]:
        """A fresh challenge's 402 body (challengeId, requestId, accepts ...)."""
        offer = await self.pipeline.access(AccessBody(plan_id, None, "default"), None)
        assert isinstance(offer, PaymentOffer)
        return offer.body

    def sign(self, buyer: LocalAccount, accepted: dict[str, Any], **overrides: Any) -> Payment:
        """``buyer`` signs ``accepted``, valid for 300 s of the frozen clock unless overridden."""
        overrides.setdefault("valid_before", int(self.clock()) + 300)
        return Payment.of(signed_payment(buyer, self.devchain.token, accepted, **overrides))

    def pay(
        self,
        payment: Payment | None,
        *,
        request_id: str | None = None,
        plan_id: str | None = "hourly",
        pipeline: AccessPipeline | None = None,
        challenge_id: str | None = None,
    ) -> Awaitable[AccessResult]:
        """What a retry of ``POST /x402/access`` does: body ``{planId, requestId?}`` + header.

        ``challenge_id`` puts that challenge into the payment's ``accepted.extra``.
        """
        body = AccessBody(plan_id, request_id, "default")
        if payment is not None and challenge_id is not None:
            wire = copy.deepcopy(payment.wire)
            wire["accepted"]["extra"]["challengeId"] = challenge_id
            payment = Payment.of(wire)
        return (pipeline or self.pipeline).access(body, payment.payload if payment else None)

    def key(self, payment: Payment) -> PaymentKey:
        """The payment claim's key: (chainId, asset, from, nonce)."""
        network = self.config.network_info
        return PaymentKey(
            network.chain_id, network.asset, payment.authorization["from"], payment.nonce
        )

    async def record(self, challenge_id: str) -> ChallengeRecord:
        record = await self.store.inner.get_challenge(challenge_id)
        assert record is not None
        return record

    def settle_on_chain(self, payment: Payment) -> str:
        """The transfer a facilitator makes with this payment (late, or behind our back)."""
        return settle_on_chain(
            self.devchain, self.relayer, payment.authorization, payment.signature
        )


async def outcome(answer: Awaitable[AccessResult]) -> AccessResult | ProblemError:
    """The pipeline's answer, a problem included (what the route would turn into HTTP)."""
    try:
        return await answer
    except ProblemError as exc:
        return exc


def problem(answer: AccessResult | ProblemError, status: int, code: str) -> ProblemError:
    """Assert the answer is the problem ``status``/``code`` (never a grant) and return it."""
    assert isinstance(answer, ProblemError), answer
    assert (answer.status, answer.code) == (status, code), answer.to_problem()
    return answer


def granted(answer: AccessResult | ProblemError) -> dict[str, Any]:
    """Assert the answer is a grant and return the AccessGrant."""
    assert isinstance(answer, AccessGranted), answer
    return answer.grant


def _store(kind: str, tmp_path: Path) -> Store:
    if kind == "memory":
        return MemoryStore()
    assert kind == "sqlite"
    return SqliteStore(tmp_path / "x402srv.db")


@asynccontextmanager
async def open_rig(
    devchain: Devchain,
    tmp_path: Path,
    *,
    settler: ScriptedSettler | None = None,
    issuer: CredentialIssuer | Callable[[FrozenClock], CredentialIssuer] | None = None,
    chain: bool = True,
    store: str = "memory",
    lease_seconds: int = 120,
    reconciler: dict[str, Any] | None = None,
    plans: list[dict[str, Any]] | None = None,
    refunds: dict[str, Any] | None = None,
) -> AsyncIterator[Rig]:
    """A pipeline for one test; its store and chain reader are closed afterwards.

    ``issuer`` is an issuer, or a function of the rig's clock that builds one.
    """
    sections: dict[str, Any] = {"refunds": refunds} if refunds else {}
    data = seller_config(
        rpc_url=devchain.rpc_url,
        chain_id=devchain.chain_id,
        asset=devchain.token.address,
        wallet_address=Account.create().address,
        store={"backend": store},
        # The configured strategy is never built: the test hands its ScriptedSettler in.
        settlement={
            "strategy": "facilitator",
            "facilitator_url": "http://127.0.0.1:9",
            "lease_seconds": lease_seconds,
        },
        credentials={"secret": JWT_SECRET},
        reconciler=reconciler or {},
        plans=plans,
        **sections,
    )
    config = parse_config(data, base_dir=tmp_path)
    clock = FrozenClock(float(devchain.block_timestamp()))
    rpc = RpcLog()
    client = httpx.AsyncClient(transport=rpc)
    reader = ChainReader(devchain.rpc_url, client=client)
    racing = RacingStore(_store(store, tmp_path))
    if issuer is None:
        context = PluginContext(config=config, name="jwt", key_path="credentials.jwt", clock=clock)
        issuer = build_jwt_issuer(context)
    elif isinstance(issuer, type) or not isinstance(issuer, CredentialIssuer):
        issuer = issuer(clock)  # a class is a factory too (its attributes fool isinstance)
    settler = settler or ScriptedSettler()
    pipeline = AccessPipeline(
        config,
        store=racing,
        settler=settler,
        issuer=issuer,
        chain=reader if chain else None,
        clock=clock,
    )
    await racing.start()
    try:
        yield Rig(
            devchain=devchain,
            config=config,
            clock=clock,
            store=racing,
            settler=settler,
            issuer=issuer,
            chain=reader if chain else None,
            reader=reader,
            rpc=rpc,
            pipeline=pipeline,
            relayer=devchain.new_account(eth=10, usdc_atomic=0),
        )
    finally:
        await racing.close()
        await client.aclose()


#: The ``make_rig`` fixture: ``await make_rig(**open_rig options)``.
MakeRig = Callable[..., Awaitable[Rig]]
