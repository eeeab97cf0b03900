"""The refund wallet: its address, its signature on a refund, its token balance.

The wallet signs an EIP-3009 ``transferWithAuthorization`` from itself to the
buyer, with the refund's own nonce (``records.refund_nonce``), and hands it
to the network's settlers exactly as a buyer's payment is handed to them
(``SettlementRequest``): a facilitator settles it without the seller paying
gas, the gas wallet is the fallback (docs/refunds.md). Its key is a
``Secret`` and is never logged or shown; ``check`` shows its address only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eth_typing import Hash32

from x402srv.config.models import Config
from x402srv.config.secrets import Secret
from x402srv.interfaces import Authorization, SettlementRequest
from x402srv.refunds.records import RefundRecord
from x402srv.settlement.chain import ChainReader, ChainUnavailable, address_topic
from x402srv.wire.eip712 import Eip3009Domain, TransferAuthorization
from x402srv.wire.networks import NetworkInfo

if TYPE_CHECKING:
    from eth_account.signers.local import LocalAccount

__all__ = [
    "RefundWallet",
    "WalletBalance",
    "balances",
    "refund_readiness",
    "wallet_for",
    "wallets",
]

_BALANCE_OF = "0x70a08231"


class RefundWallet:
    """One refund key, opened once; ``repr`` shows the address, never the key."""

    def __init__(self, key: Secret) -> None:
        # (eth_account here, not at the top: it takes ~0.25 s of CPU to import, and every
        # x402srv process imports this module, a seller without refunds too)
        from eth_account import Account

        try:
            self._account: LocalAccount = Account.from_key(key.reveal())
        except (ValueError, TypeError):
            raise ValueError("refunds: the refund wallet's key is not a private key") from None
        self.address: str = self._account.address

    def __repr__(self) -> str:
        return f"RefundWallet({self.address})"

    def authorize(self, refund: RefundRecord, network: NetworkInfo) -> SettlementRequest:
        """The refund as a payment from this wallet to the buyer, for the network's settlers."""
        if refund.valid_before is None:
            raise ValueError("a refund is signed only once it is SENDING (valid_before fixed)")
        nonce = refund.nonce
        auth = TransferAuthorization(
            payer=self.address,
            to=refund.to,
            value=refund.value,
            valid_after=0,
            valid_before=refund.valid_before,
            nonce=bytes.fromhex(nonce[2:]),
        )
        domain = Eip3009Domain(
            network.asset_name, network.asset_version, network.chain_id, network.asset
        )
        signed = self._account.unsafe_sign_hash(Hash32(auth.digest(domain)))
        signature = "0x" + bytes(signed.signature).hex()
        wire = {
            "from": self.address,
            "to": refund.to,
            "value": refund.amount,
            "validAfter": "0",
            "validBefore": str(refund.valid_before),
            "nonce": nonce,
        }
        requirements: dict[str, Any] = {
            "scheme": "exact",
            "network": network.caip2,
            "amount": refund.amount,
            "asset": network.asset,
            "payTo": refund.to,
            "maxTimeoutSeconds": max(1, refund.valid_before - int(refund.created_at)),
            "extra": {"name": network.asset_name, "version": network.asset_version},
        }
        return SettlementRequest(
            challenge_id=refund.refund_id,
            attempt_id=f"{refund.refund_id}:{refund.version}",
            authorization=Authorization(
                payer=self.address,
                to=refund.to,
                value=refund.value,
                valid_after=0,
                valid_before=refund.valid_before,
                nonce=nonce,
                signature=signature,
            ),
            payload={
                "x402Version": 2,
                "payload": {"authorization": wire, "signature": signature},
                "accepted": requirements,
            },
            requirements=requirements,
            network=network,
        )


def wallets(config: Config) -> dict[str, RefundWallet]:
    """The refund wallet of each network that has one (CAIP-2 -> wallet)."""
    found: dict[str, RefundWallet] = {}
    for network in config.resolved_networks:
        key = config.refunds.key_for(network.name, network.caip2)
        if key is not None:
            found[network.caip2] = RefundWallet(key)
    return found


def wallet_for(config: Config, caip2: str) -> RefundWallet | None:
    return wallets(config).get(caip2)


@dataclass(frozen=True, slots=True)
class WalletBalance:
    network: str
    asset: str
    address: str
    balance: int | None  # None: the RPC did not answer
    low: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "network": self.network,
            "asset": self.asset,
            "address": self.address,
            "balance": None if self.balance is None else str(self.balance),
            "low": self.low,
        }


async def balances(
    config: Config, chains: Mapping[str, ChainReader], found: Mapping[str, RefundWallet]
) -> list[WalletBalance]:
    """Each refund wallet's balance of each token of its network; ``low`` under the threshold."""
    shown: list[WalletBalance] = []
    for network in config.resolved_networks:
        wallet = found.get(network.caip2)
        chain = chains.get(network.caip2)
        if wallet is None:
            continue
        for option in network.options:
            balance: int | None = None
            if chain is not None:
                data = _BALANCE_OF + address_topic(wallet.address)[2:]
                try:
                    raw = await chain.call(
                        "eth_call", [{"to": option.asset, "data": data}, "latest"]
                    )
                    balance = int(str(raw), 16)
                except (ChainUnavailable, ValueError):
                    balance = None
            low = balance is None or balance < config.refunds.low_balance
            shown.append(WalletBalance(network.caip2, option.asset, wallet.address, balance, low))
    return shown


def refund_readiness(
    config: Config, chains: Mapping[str, ChainReader]
) -> Callable[[], Awaitable[dict[str, Any]]] | None:
    """What ``/readyz`` adds: each refund wallet's balance, and a warning when one is low.

    A low refund wallet never makes the server unready (purchases still work);
    ``warnings`` says so where an operator's probe looks.
    """
    found = wallets(config)
    if not found:
        return None

    async def extras() -> dict[str, Any]:
        held = await balances(config, chains, found)
        shown: dict[str, Any] = {"refund_wallets": [each.to_dict() for each in held]}
        low = [
            f"refund wallet {each.address} on {each.network} holds less than "
            f"refunds.low_balance of {each.asset}"
            for each in held
            if each.low
        ]
        if low:
            shown["warnings"] = low
        return shown

    return extras
