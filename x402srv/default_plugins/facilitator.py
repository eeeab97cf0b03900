"""Built-in settler ``facilitator``: an x402 v2 facilitator verifies, settles and pays gas.

    GET  /supported   at start-up: the facilitator must list (v2, exact, our network)
    POST /verify      {x402Version: 2, paymentPayload, paymentRequirements}
    POST /settle      same body

Before ``/settle`` the transfer is checked against the token itself: the
official SDK's settle re-verifies the signature but does not simulate the
transfer, so a payer without the funds got a reverted transaction (the
facilitator's gas spent, and an outcome only the chain could tell). With an RPC
of its own x402srv simulates ``transferWithAuthorization`` there
(``transfer_call.preflight``: one ``eth_call``, ~1 ms on a local node; the pipeline
runs it as ``precheck`` while it writes the hand-over, and ``settle`` does not ask
again); without
one, or when it cannot answer, it asks ``/verify`` (a round trip through the
facilitator, ~10 ms). Either way an unfunded payer gets
``invalid_exact_evm_insufficient_balance`` at once.

While ``/settle`` is out, the chain is watched too (``watch_chain_after_seconds``,
docs/settlement.md#facilitator): a facilitator answers only once it has the
transaction's receipt, and the official SDK's facilitator polls for it every
100 ms, so when its first poll came a moment before the block was mined (anvil
mines a moment after it accepts a transaction) the buyer waited ~100 ms for a
transfer that was already final. From ``watch_chain_after_seconds`` on (or twice
the usual /settle, when that is longer: a loaded machine or a slow chain costs no
reads while settlements go as usual), x402srv reads ``authorizationState``
itself, at doubling intervals; once it reads "used", the newest blocks' logs name
the transaction (``WATCH_LOOKBACK_BLOCKS``), and a receipt that moved this payment
to payTo is ``Settled`` at once, whatever the facilitator answers later. Only a
transfer ends the wait early: anything else the chain shows waits for the answer.

How answers map to the pipeline (docs/protocol/flow.md, step 8):

- refused before the request left (connect error/timeout), a 4xx that names
  no transaction, ``isValid: false``, or ``success: false`` with no
  transaction: nothing is on-chain -> ``Rejected`` with the facilitator's reason.
  When the facilitator is at fault rather than the payment (it cannot be
  reached, does not serve our network, refuses our credentials, is rate
  limiting us) the ``Rejected`` says so (``settler_failed``): a network with
  several settlers tries the next one at once;
- read timeout, dropped connection, 5xx, ``settlement_pending``, an unreadable
  answer, or any answer (a 4xx too) that names a transaction: ``Unknown`` — the
  record stays SETTLING and the chain decides, never a second settle;
- ``success: true`` is confirmed from the chain when an RPC is known (receipt
  status and the Transfer log to payTo of the right value); a claim the chain
  does not back is resolved from the authorization itself.

Only the chain and the buyer's signature decide who paid: the payer is the
authorization's ``from`` (checked by the pipeline), never the ``payer`` string
of a facilitator's answer, which is not even read. ``senders`` tells the
failover which addresses the facilitator sends transactions from (the
``signers`` of its ``/supported``), so a history names the settler whose
transaction the chain shows.

The facilitator URL (it may carry credentials), its raw answers and the
payload never reach logs or clients: they name it by its label
(``facilitator https://host/<redacted> #2 on eip155:8453``).

One is built per network it settles on. At start-up it asks ``/supported``:
a facilitator that does not list ``(v2, exact, network)`` is a config error
when it is its network's only settler, and a warning when the network has
others to fail over to (it is then skipped, and asked again by ``/readyz``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import statistics
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from pydantic import Field

from x402srv.config.fields import PluginOptions
from x402srv.config.models import Config, SettlerConfig
from x402srv.config.secrets import shown_url
from x402srv.errors import ConfigError
from x402srv.hookspecs import Register, hookimpl
from x402srv.interfaces import (
    Rejected,
    Settled,
    SettlementHooks,
    SettlementOutcome,
    SettlementRequest,
    Settler,
    Unknown,
)
from x402srv.server.plugin_context import PluginContext
from x402srv.settlement.chain import ChainReader, ChainUnavailable
from x402srv.settlement.transfer_call import preflight
from x402srv.settlement.verdicts import NotTransferred, Transferred, resolve_authorization
from x402srv.wire.networks import NetworkInfo
from x402srv.wire.protocol import bounded_json
from x402srv.wire.reasons import Reason

log = logging.getLogger("x402srv.facilitator")

#: Reasons that blame the facilitator (it does not serve this network or scheme), not
#: the payment: another facilitator may well settle it.
_NOT_SERVED = frozenset({"unsupported_scheme", "invalid_network", "unsupported_network"})
#: While a facilitator's signers are unknown, ``/supported`` is asked again at most this often.
SENDERS_REFRESH_SECONDS = 60.0
#: HTTP statuses that blame the facilitator or our access to it, not the payment.
_FACILITATOR_FAULT = frozenset({401, 403, 404, 405, 408, 409, 429})


class FacilitatorOptions(PluginOptions):
    """``[settlement.facilitator]``"""

    connect_timeout_seconds: float = Field(default=5.0, gt=0, le=60)
    read_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    # None: /verify only when the transfer could not be simulated on x402srv's RPC.
    verify_before_settle: bool | None = None
    confirm_seconds: float = Field(default=10.0, ge=0, le=120)
    # Seconds after /settle was sent before the chain is read too (0: never; docstring).
    watch_chain_after_seconds: float = Field(default=0.02, ge=0, le=60)


#: Longest pause between two chain reads while /settle is out.
WATCH_MAX_POLL_SECONDS = 0.5
#: The watch starts no sooner than this many times a usual /settle (the median of the
#: last ``WATCH_SAMPLES`` answered), so settlements that go as usual cost no chain read.
WATCH_AFTER_USUAL = 2.0
WATCH_SAMPLES = 31
#: Blocks searched for the transfer once the watch reads the authorization used: it was
#: broadcast after /settle was sent, so only the newest blocks can hold it.
WATCH_LOOKBACK_BLOCKS = 64


class FacilitatorSettler:
    name = "facilitator"

    def __init__(
        self,
        config: Config,
        options: FacilitatorOptions,
        chain: ChainReader | None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        network: NetworkInfo | None = None,
        settler: SettlerConfig | None = None,
        path: str = "settlement",
        label: str | None = None,
        sole: bool = True,
    ) -> None:
        network = network or config.network_info
        settler = settler or config.settlement.as_settler()
        url = settler.facilitator_url.reveal() if settler.facilitator_url else None
        url = url or network.default_facilitator_url
        if not url:
            raise ConfigError(
                f"required: {network.name} has no default facilitator",
                path=f"{path}.facilitator_url",
            )
        if options.read_timeout_seconds >= config.settlement.lease_seconds - 2:
            raise ConfigError(
                "must be shorter than settlement.lease_seconds minus 2 s",
                path="settlement.facilitator.read_timeout_seconds",
            )
        self._url = url.rstrip("/")
        self.shown_url = shown_url(self._url)  # the path is shown: only credentials are not
        self.label = label or f"facilitator {self.shown_url}"
        self._auth = settler.facilitator_auth
        self._options = options
        self._network = network
        self._chain = chain
        self._transport = transport
        self._sole = sole
        self._path = path
        #: False once /supported answered without our network (only when others can settle).
        self._serves_network = True
        #: The addresses its /supported lists as signers for our network (lowercase).
        self._senders: frozenset[str] = frozenset()
        self._senders_asked_at: float | None = None  # loop time of the last /supported read
        self._client: httpx.AsyncClient | None = None
        #: How long the last /settle requests took to be answered (``_watch``).
        self._settle_seconds: collections.deque[float] = collections.deque(maxlen=WATCH_SAMPLES)
        #: /settle requests still out whose transfer the chain showed first (``_watch``).
        self._late: set[asyncio.Future[dict[str, Any]]] = set()

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        headers = {"Accept": "application/json"}
        if self._auth is not None:
            headers["Authorization"] = f"Bearer {self._auth.reveal()}"
        timeout = httpx.Timeout(
            connect=self._options.connect_timeout_seconds,
            read=self._options.read_timeout_seconds,
            write=self._options.read_timeout_seconds,
            pool=self._options.connect_timeout_seconds,
        )
        self._client = httpx.AsyncClient(
            headers=headers, timeout=timeout, transport=self._transport
        )
        await self._check_supported()

    async def close(self) -> None:
        for posting in list(self._late):
            posting.cancel()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def senders(self) -> frozenset[str]:
        """The addresses it settles from on our network, as its ``/supported`` lists them.

        Read at start-up and by every ``/readyz``; asked again here at most
        every ``SENDERS_REFRESH_SECONDS`` while unknown (a facilitator that was
        down at start-up), so a failover never waits on a dead facilitator.
        """
        now = asyncio.get_running_loop().time()
        asked = self._senders_asked_at
        if not self._senders and (asked is None or now - asked >= SENDERS_REFRESH_SECONDS):
            with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
                await self._supported()
        return self._senders

    async def check_ready(self) -> str | None:
        """For ``/readyz``: None when the facilitator answers and lists our network."""
        try:
            listed = await self._supported()
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            return f"facilitator unreachable ({type(exc).__name__})"
        self._serves_network = (2, "exact", self._network.caip2) in listed
        if not self._serves_network:
            return f"facilitator does not list exact on {self._network.caip2}"
        return None

    async def _check_supported(self) -> None:
        try:
            listed = await self._supported()
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            log.warning(
                "%s unreachable at start-up (%s); settlements will try it anyway",
                self.label,
                type(exc).__name__,
            )
            return
        wanted = (2, "exact", self._network.caip2)
        if wanted not in listed:
            offered = ", ".join(sorted(f"v{v} {s} {n}" for v, s, n in listed if s)) or "nothing"
            if self._sole:
                raise ConfigError(
                    f"the facilitator at {self.shown_url} does not support x402 v2 exact on "
                    f"{self._network.caip2} (it lists: {offered})",
                    path=f"{self._path}.facilitator_url",
                )
            self._serves_network = False
            log.warning(
                "%s does not support x402 v2 exact on %s (it lists: %s); the failover "
                "skips it until it does",
                self.label,
                self._network.caip2,
                offered,
            )

    async def _supported(self) -> set[tuple[object, object, object]]:
        """What ``GET /supported`` lists (its signers noted); raises what the request raises."""
        assert self._client is not None
        self._senders_asked_at = asyncio.get_running_loop().time()
        response = await self._client.get(f"{self._url}/supported")
        response.raise_for_status()
        answer = bounded_json(response.content)
        self._senders = _signers(answer.get("signers"), self._network.caip2)
        return _listed(answer.get("kinds", []))

    # ------------------------------------------------------------ settle

    async def settle(self, request: SettlementRequest, hooks: SettlementHooks) -> SettlementOutcome:
        if not self._serves_network:
            return Rejected(
                Reason.INVALID_NETWORK,
                f"The facilitator does not settle on {request.network.caip2}.",
                settler_failed=True,
            )
        body = {
            "x402Version": 2,
            "paymentPayload": dict(request.payload),
            "paymentRequirements": dict(request.requirements),
        }
        simulated = request.prechecked  # the pipeline ran ``precheck`` a moment ago
        # (a precheck that could not tell met the same node a moment ago: /verify instead)
        if self._chain is not None and not simulated and not request.precheck_failed:
            try:
                refused = await preflight(self._chain, request)
            except ChainUnavailable as exc:
                log.warning("cannot simulate the transfer (%s); asking /verify instead", exc)
            else:
                if refused is not None:
                    return refused  # the token refuses it, or it was paid already
                simulated = True
        verify = self._options.verify_before_settle
        if verify or (verify is None and not simulated):
            verdict = await self._verify(body)
            if verdict is not None:
                return verdict
        return await self._settle(request, body, hooks)

    async def precheck(self, request: SettlementRequest) -> SettlementOutcome | None:
        """``settle``'s simulation of the transfer, which the pipeline runs ahead of it.

        It runs while the pipeline records the hand-over, and ``settle`` then skips
        its own (``request.prechecked``): None when the token would take the transfer
        now, else the outcome to answer. Raises ``ChainUnavailable`` when it cannot
        tell (no RPC, or the node did not answer): ``settle`` then asks ``/verify``
        (``request.precheck_failed``) rather than wait on the same node again.
        """
        if self._chain is None:
            raise ChainUnavailable("no RPC to simulate the transfer on")
        return await preflight(self._chain, request)

    async def _verify(self, body: dict[str, Any]) -> Rejected | None:
        """None when valid. /verify moves nothing, so every failure here is definite."""
        try:
            answer = await self._post("/verify", body)
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("%s /verify failed: %s", self.label, type(exc).__name__)
            return Rejected(
                Reason.UNEXPECTED_VERIFY_ERROR,
                "the facilitator could not verify the payment",
                settler_failed=True,
            )
        if answer.get("isValid") is True:
            return None
        reason = str(answer.get("invalidReason") or "invalid_payload")
        return Rejected(
            reason, "the facilitator refused the payment", settler_failed=reason in _NOT_SERVED
        )

    async def _settle(
        self, request: SettlementRequest, body: dict[str, Any], hooks: SettlementHooks
    ) -> SettlementOutcome:
        posting = asyncio.ensure_future(self._timed_post("/settle", body))
        try:
            landed = await self._watch(request, posting)
        except BaseException:
            posting.cancel()  # cancelled (the lease ran out): nobody reads the answer
            raise
        if landed is not None:
            # The chain shows the transfer; the answer still due changes nothing.
            # Its receipt was read and checked: the pipeline records PAID with it next.
            self._late.add(posting)
            posting.add_done_callback(self._late_answer)
            return Settled(landed, request.authorization.payer)
        try:
            answer = await posting
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            log.warning("%s /settle not reached: %s", self.label, type(exc).__name__)
            return Rejected(
                Reason.UNEXPECTED_SETTLE_ERROR,
                "the facilitator could not be reached",
                settler_failed=True,
            )
        except httpx.HTTPStatusError as exc:
            status = exc.response.status_code
            named, reason = _error_answer(exc.response.content)
            if named is not None:
                # Whatever the status says, a transaction exists: only the chain can tell.
                await hooks.note_broadcast(named)
                return Unknown(f"facilitator answered {status} naming a transaction", named)
            if status >= 500:
                return Unknown(f"facilitator answered {status}")
            if reason == Reason.NONCE_USED:
                return Rejected(reason, "the facilitator found the authorization used")
            return Rejected(
                reason or Reason.UNEXPECTED_SETTLE_ERROR,
                "the facilitator refused to settle",
                settler_failed=status in _FACILITATOR_FAULT or reason in _NOT_SERVED,
            )
        except (httpx.HTTPError, ValueError) as exc:
            return Unknown(f"facilitator /settle: {type(exc).__name__}")
        tx_hash = _tx_hash(answer.get("transaction"))
        if answer.get("success") is not True:
            reason = str(answer.get("errorReason") or Reason.UNEXPECTED_SETTLE_ERROR)
            if tx_hash:
                await hooks.note_broadcast(tx_hash)
            if reason == "settlement_pending" or tx_hash:
                return Unknown(reason, tx_hash)
            return Rejected(
                reason,
                "the facilitator could not settle the payment",
                settler_failed=reason in _NOT_SERVED,
            )
        if tx_hash is None:
            return Unknown("facilitator reported success without a transaction")
        # The payer is whoever signed the authorization (checked by the pipeline), never
        # what the answer says: a facilitator's "payer" reached records, tokens, the
        # X-X402-Payer header and spreadsheets before (docs/facilitators.md).
        payer = request.authorization.payer
        noted = False

        async def note() -> None:
            nonlocal noted
            if not noted:
                noted = True
                await hooks.note_broadcast(tx_hash)

        # A facilitator answers once its transaction is mined, so the first receipt read
        # nearly always confirms it and the pipeline records PAID with the txHash at
        # once: the hint alone is written only when the chain does not back the answer
        # at first sight (a receipt still to come, a transfer that does not match), so
        # that whoever decides the record later reads that receipt first. A crash
        # between the answer and PAID leaves the record SETTLING without it, as a crash
        # while /settle was out does: the chain decides it from the authorization's own
        # events (docs/protocol/states.md).
        outcome = await self._confirm(request, tx_hash, payer, before_waiting=note)
        if not isinstance(outcome, Settled):
            await note()
        return outcome

    async def _watch(
        self, request: SettlementRequest, posting: asyncio.Future[dict[str, Any]]
    ) -> str | None:
        """The transfer's txHash if the chain shows it before ``posting`` is answered.

        None as soon as the facilitator has answered (or without an RPC): its
        answer is then read as usual. A read that fails only ends the watch.
        """
        after = self._options.watch_chain_after_seconds
        if self._chain is None or after <= 0:
            return None
        if len(self._settle_seconds) >= 5:  # a loaded machine or a slow chain: later
            after = max(after, WATCH_AFTER_USUAL * statistics.median(self._settle_seconds))
        auth = request.authorization
        asset, pay_to = str(request.requirements["asset"]), str(request.requirements["payTo"])
        delay = after
        while True:
            done, _ = await asyncio.wait({posting}, timeout=delay)
            if done:
                return None
            delay = min(max(delay, 0.01) * 2, WATCH_MAX_POLL_SECONDS)
            try:
                if not await self._chain.authorization_state(asset, auth.payer, auth.nonce):
                    continue
                landed = await self._recent_transfer(request, asset, pay_to)
            except ChainUnavailable as exc:
                log.debug("%s: watching the chain during /settle stopped: %s", self.label, exc)
                await asyncio.wait({posting})
                return None
            if landed is not None:
                log.debug("%s: the chain shows %s before /settle answered", self.label, landed)
                return landed
            # used, but not (yet) as this payment's transfer: the answer decides

    async def _recent_transfer(
        self, request: SettlementRequest, asset: str, pay_to: str
    ) -> str | None:
        """The transaction of the last ``WATCH_LOOKBACK_BLOCKS`` that moved this payment."""
        assert self._chain is not None
        auth = request.authorization
        events = await self._chain.authorization_events(
            asset, auth.payer, auth.nonce, lookback=WATCH_LOOKBACK_BLOCKS
        )
        for event in events:
            receipt = await self._chain.receipt(event.tx_hash)
            if receipt is not None and receipt.settles(
                asset, auth.payer, pay_to, auth.value, auth.nonce
            ):
                return receipt.tx_hash
        return None

    def _late_answer(self, posting: asyncio.Future[dict[str, Any]]) -> None:
        """The answer of a /settle whose transfer the chain had shown already: only read."""
        self._late.discard(posting)
        if not posting.cancelled() and posting.exception() is not None:
            log.debug(
                "%s: /settle answered after the chain: %s",
                self.label,
                type(posting.exception()).__name__,
            )

    async def _timed_post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """``_post``, its time noted when answered: what a usual /settle takes (``_watch``)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        answer = await self._post(path, body)
        self._settle_seconds.append(loop.time() - started)
        return answer

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self._client is not None, "settler not started"
        response = await self._client.post(f"{self._url}{path}", json=body)
        if response.status_code >= 400:
            response.raise_for_status()
        answer = bounded_json(response.content)  # a facilitator must not be able to crash us
        if not isinstance(answer, dict):
            raise ValueError("facilitator answer is not a JSON object")
        return answer

    async def _confirm(
        self,
        request: SettlementRequest,
        tx_hash: str,
        payer: str,
        *,
        before_waiting: Callable[[], Awaitable[None]],
    ) -> SettlementOutcome:
        """Trust the facilitator's success only as far as the chain backs it.

        ``before_waiting`` runs once the first read finds no receipt, before the wait.
        """
        if self._chain is None:
            return Settled(tx_hash, payer)
        auth = request.authorization
        asset, pay_to = str(request.requirements["asset"]), str(request.requirements["payTo"])
        deadline = asyncio.get_running_loop().time() + self._options.confirm_seconds
        delay = 0.02  # doubling up to 0.5 s: a fast chain has the receipt almost at once
        try:
            while True:
                receipt = await self._chain.receipt(tx_hash)
                if receipt is not None:
                    break
                await before_waiting()
                if asyncio.get_running_loop().time() >= deadline:
                    return Unknown("facilitator's transaction not found on-chain yet", tx_hash)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
            if receipt.settles(asset, auth.payer, pay_to, auth.value, auth.nonce):
                return Settled(receipt.tx_hash, auth.payer)
            log.warning("facilitator reported %s but the chain shows no matching transfer", tx_hash)
            verdict = await resolve_authorization(
                self._chain,
                asset=asset,
                payer=auth.payer,
                pay_to=pay_to,
                value=auth.value,
                nonce=auth.nonce,
                valid_before=auth.valid_before,
            )
        except ChainUnavailable as exc:
            log.warning("cannot confirm facilitator settlement on-chain: %s", exc)
            return Unknown("chain unavailable for confirmation", tx_hash)
        if isinstance(verdict, Transferred):
            return Settled(verdict.tx_hash, auth.payer)
        if isinstance(verdict, NotTransferred):
            return Rejected(
                Reason.TRANSACTION_FAILED, "the chain shows no transfer for this payment"
            )
        return Unknown(verdict.why)


def _tx_hash(value: object) -> str | None:
    """A 32-byte transaction hash, or None for anything else a facilitator put there."""
    if isinstance(value, str) and len(value) == 66 and value.startswith("0x"):
        try:
            int(value[2:], 16)
        except ValueError:
            return None
        return value
    return None


def _error_answer(content: bytes) -> tuple[str | None, str | None]:
    """The transaction an error answer names, and its reason, if it is readable JSON."""
    try:
        answer = bounded_json(content)
    except (ValueError, UnicodeDecodeError):
        return None, None
    if not isinstance(answer, dict):
        return None, None
    reason = answer.get("errorReason") or answer.get("invalidReason")
    return _tx_hash(answer.get("transaction")), str(reason)[:128] if reason else None


def _signers(signers: object, network: str) -> frozenset[str]:
    """The addresses ``/supported`` lists under our network or its CAIP family (``eip155:*``)."""
    if not isinstance(signers, dict):
        return frozenset()
    family = network.split(":", 1)[0] + ":*"
    found: set[str] = set()
    for key in (network, family):
        addresses = signers.get(key)
        if isinstance(addresses, list):
            found.update(a.lower() for a in addresses if isinstance(a, str) and _is_address(a))
    return frozenset(found)


def _is_address(value: str) -> bool:
    if len(value) != 42 or not value.startswith("0x"):
        return False
    try:
        int(value[2:], 16)
    except ValueError:
        return False
    return True


def _listed(kinds: object) -> set[tuple[object, object, object]]:
    """(x402Version, scheme, network) of every kind a ``/supported`` answer lists."""
    if not isinstance(kinds, list):
        return set()
    return {
        (k.get("x402Version"), k.get("scheme"), k.get("network"))
        for k in kinds
        if isinstance(k, dict)
    }


def _factory(ctx: PluginContext) -> FacilitatorSettler:
    return FacilitatorSettler(
        ctx.config,
        ctx.parse_options(FacilitatorOptions),
        ctx.chain,
        network=ctx.on_network,
        settler=ctx.settlement,
        path=ctx.settlement_path,
        label=ctx.settler.label if ctx.settler is not None else None,
        sole=ctx.sole_settler,
    )


@hookimpl
def register_settlers(register: Register[Settler]) -> None:
    register("facilitator", _factory)
