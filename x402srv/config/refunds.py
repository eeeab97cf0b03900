"""``[refunds]``: the refund wallet, and the automatic refunds (docs/refunds.md).

The refund wallet signs every refund's EIP-3009 authorization; the network's
settlers send it (so the wallet needs tokens, never gas). One key serves every
network unless ``[[refunds.wallets]]`` names a network's own. Without a key no
refund can be asked for; with one, ``check`` shows the wallet's address and
``check`` and ``/readyz`` its token balance, warning below ``low_balance``.
Automatic refunds are each off until switched on (``auto_owed_top_ups``,
``auto_undelivered_after_seconds``, ``auto_unused_credits``).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from x402srv.config.fields import StrictModel
from x402srv.config.networks import network_name
from x402srv.config.secrets import Secret, SecretValue

__all__ = ["RefundWalletConfig", "RefundsConfig"]


class RefundWalletConfig(StrictModel):
    """``[[refunds.wallets]]``: the refund wallet of one network (CAIP-2 or a known name)."""

    network: str
    private_key: SecretValue

    @field_validator("network")
    @classmethod
    def _network(cls, value: str) -> str:
        return network_name(value)


class RefundsConfig(StrictModel):
    private_key: SecretValue | None = None
    wallets: list[RefundWalletConfig] = Field(default_factory=list, max_length=64)
    #: Warn (``check``, ``/readyz``) when the wallet holds fewer atomic units than this.
    low_balance: int = Field(default=1_000_000, ge=0)
    #: How long a refund's signed authorization stays valid; a refund not on-chain by
    #: then FAILED (nothing moved) and its amount may be refunded again.
    authorization_seconds: int = Field(default=900, ge=30, le=86_400)
    #: Refund, on every reconciler pass, each top-up that could not be credited (OWED).
    auto_owed_top_ups: bool = False
    #: Refund, on every reconciler pass, each purchase paid this many seconds ago whose
    #: credential could still not be issued (None: never). The purchase moves PAID -> OWED
    #: first, a compare-and-set that a delivery made meanwhile wins.
    auto_undelivered_after_seconds: int | None = Field(default=None, ge=10, le=30 * 86_400)
    #: When a grant of a plan that sells calls is revoked, refund the unused credits'
    #: share of what was paid (pro rata, atomic units rounded down).
    auto_unused_credits: bool = False

    def key_for(self, network: str, caip2: str) -> Secret | None:
        """The refund wallet's key on a network (its name or CAIP-2), or None: no refunds there."""
        for wallet in self.wallets:
            if wallet.network in (network, caip2):
                return wallet.private_key
        return self.private_key

    @property
    def enabled(self) -> bool:
        return self.private_key is not None or bool(self.wallets)
